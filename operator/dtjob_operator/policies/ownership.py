"""Child ownership: may the job use an object that already has one of its children's names?

Child names are deterministic, so a create can meet an object that is already there
(409 AlreadyExists). Taking it blindly is wrong twice over: after `kubectl delete -f x &&
kubectl apply -f x` the old job's children are still there until Kubernetes' garbage
collector removes them, and the new job would lose them moments later; and anyone who can
create a job but not pods could make its pods run as a ServiceAccount of their choosing by
naming the job after it. So an existing object is used only when an owner reference names
this very job (its UID). One owned by an earlier job of the same name is waited for; one
not owned by the job at all is never used: the job waits, with a condition and an event
that name the object and what to do, and creates no pods that would depend on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtjob_api import KIND
from dtjob_operator.policies.create_errors import CreateError

ALREADY_EXISTS = 409


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """True when `obj` has an owner reference to the object with `uid`."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def ownership_conflict(
    existing: Mapping[str, Any] | None, kind: str, name: str, job_name: str, job_uid: str
) -> CreateError | None:
    """None when `existing` (the object a create found in the way) belongs to the job with
    `job_uid`; else why the job may not use it (a wait, never a failure)."""
    if existing is None:
        message = f"{kind} {name} was in the way of its create and is gone now; creating it again"
        return CreateError(kind, name, ALREADY_EXISTS, "AlreadyExists", message)
    if owned_by(existing, job_uid):
        return None
    refs = (existing.get("metadata") or {}).get("ownerReferences") or []
    earlier = [r for r in refs if r.get("kind") == KIND and r.get("name") == job_name]
    if earlier:
        message = (
            f"{kind} {name} still belongs to an earlier job named {job_name} "
            f"(uid {earlier[0].get('uid')}) that was deleted: waiting for the garbage "
            "collector to remove it before the job starts"
        )
    else:
        owners = ", ".join(f"{r.get('kind')} {r.get('name')}" for r in refs) or "no owner"
        message = (
            f"{kind} {name} already exists and is not owned by this job ({owners}): the job "
            f"will not use it and creates no pods until it is gone; delete the {kind} or "
            "re-create the job under another name"
        )
    return CreateError(kind, name, ALREADY_EXISTS, "AlreadyExists", message)
