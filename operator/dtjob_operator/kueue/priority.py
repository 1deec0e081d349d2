"""A job's Workload follows its kueue.x-k8s.io/priority-class label after it is created, as
Kueue's own job integrations keep theirs (jobframework UpdateWorkloadPriority, Kueue 0.19):
a user raises a queued job's priority by relabelling the job, never the Workload.

What follows the label, as there:
- a Workload whose priority comes from a WorkloadPriorityClass, or that has none: a label
  changed, added or removed gives it the priority derived afresh (the label's class, else
  the pods' PriorityClass, else the cluster's default; backend._priority);
- not one whose priority comes from the pods' PriorityClass (it follows
  spec.priorityClassName, which the API keeps immutable), nor one that holds quota
  without a priority (one cannot be added then).

Kueue's Workload CRD refuses (CEL) to add or drop a priorityClassRef, or change its kind,
while the Workload holds quota: such a change (the label removed from an admitted job, its
priority then a PriorityClass's or none) waits, said in a Warning Event, until the Workload
is queued again. Kueue's reconciler would fail on it at every pass instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dtjob_operator.builders import Job
from dtjob_operator.constants import EVENT_NORMAL, EVENT_WARNING
from dtjob_operator.kubehttp import ApiException
from dtjob_operator.kueue.api import KueueApi
from dtjob_operator.kueue.verdict import condition
from dtjob_operator.kueue.workload import PRIORITY_LABEL, Priority
from dtjob_operator.policies.create_errors import create_error_of

Obj = dict[str, Any]

REASON_UPDATED_WORKLOAD = "UpdatedWorkload"  # Kueue's own reason for the same Event
REASON_PRIORITY_NOT_UPDATED = "WorkloadPriorityNotUpdated"
WPC_KIND = "WorkloadPriorityClass"


@dataclass(frozen=True)
class PriorityChange:
    """What to do about a Workload's priority: a merge patch and the Normal Event that says
    it, or (patch None) the Warning Event that says why it is not changed."""

    patch: dict[str, Any] | None
    reason: str
    message: str


def _reserved(workload: Mapping[str, Any]) -> bool:
    return (condition(workload, "QuotaReserved") or {}).get("status") == "True"


def follows_label(workload: Mapping[str, Any], label: str) -> bool:
    """Whether the Workload's priority must be derived again for the job's label (cheap: no
    lookup of the class), Kueue's classifyWorkloadsForPriorityUpdate for one Workload."""
    ref = (workload.get("spec") or {}).get("priorityClassRef")
    if not ref:
        return not _reserved(workload) and bool(label)
    if ref.get("kind") != WPC_KIND:
        return False
    return str(ref.get("name") or "") != label


def priority_change(
    workload: Mapping[str, Any], job_labels: Mapping[str, str], resolved: Priority | str | None
) -> PriorityChange:
    """The change for a Workload that `follows_label`: `resolved` is the priority derived
    for the job now (None: no priority; a str: why none can be derived)."""
    meta = workload.get("metadata") or {}
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    label = job_labels.get(PRIORITY_LABEL) or ""
    ref = (workload.get("spec") or {}).get("priorityClassRef") or {}
    now = f"{ref.get('kind')} {ref.get('name')}" if ref else "no priority class"
    if isinstance(resolved, str):
        return PriorityChange(None, REASON_PRIORITY_NOT_UPDATED,
                              f"Workload {name} keeps {now}: {resolved}")  # fmt: skip
    kind = resolved.kind if resolved is not None else None
    if _reserved(workload) and (not ref or kind != WPC_KIND):
        wanted = f"{kind} {resolved.name}" if resolved is not None else "no priority class"
        return PriorityChange(
            None,
            REASON_PRIORITY_NOT_UPDATED,
            f"Workload {name} keeps {now} while Kueue holds quota for it (Kueue refuses to "
            f"change a priority class's kind then): the job's {PRIORITY_LABEL} label "
            f"{'is ' + repr(label) if label else 'was removed'}, which means {wanted}; it "
            f"applies when the Workload is queued again",
        )
    spec: dict[str, Any] = {
        "priorityClassRef": resolved.ref() if resolved is not None else None,
        "priority": resolved.value if resolved is not None else 0,
    }
    patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "spec": spec}
    became = (
        f"{resolved.kind} {resolved.name} (priority {resolved.value})"
        if resolved is not None
        else "no priority class (priority 0)"
    )
    return PriorityChange(
        patch, REASON_UPDATED_WORKLOAD, f"Updated workload priority class: {name} now has {became}"
    )


Resolve = Callable[[Obj, Job], Priority | str | None]
EmitEvent = Callable[[Obj, str, str, str], None]


class PriorityFollower:
    """Keeps each job's Workload priority in step with its label: the patch, the Event that
    says it, and a Warning (once per cause, not at every pass) when it cannot be done."""

    def __init__(self, api: KueueApi, emit_event: EmitEvent, resolve: Resolve) -> None:
        self.api, self.emit_event, self.resolve = api, emit_event, resolve
        self._said: dict[str, str] = {}  # by job uid: the last Warning

    def follow(self, job_obj: Obj, job: Job, workload: Obj) -> None:
        """One reconcile's look at the job's (not MultiKueue-made) Workload; the Workload
        read is updated in place when patched, for the rest of the pass."""
        meta = job_obj["metadata"]
        labels = meta.get("labels") or {}
        if not follows_label(workload, str(labels.get(PRIORITY_LABEL) or "")):
            self._said.pop(meta["uid"], None)
            return
        change = priority_change(workload, labels, self.resolve(job_obj, job))
        if change.patch is None:
            self._say_once(job_obj, change.reason, change.message)
            return
        name = workload["metadata"]["name"]
        try:
            self.api.patch_workload(meta["namespace"], name, change.patch)
        except ApiException as exc:
            if exc.status == 409:  # Kueue wrote the Workload meanwhile: the next pass again
                return
            if exc.status != 422:
                raise
            # Refused by the Workload's own validation (a rule of a newer Kueue): said, and
            # the job goes on with the priority it has.
            said = create_error_of("Workload", name, exc.status, exc.reason, exc.body).message
            refused = f"Workload {meta['namespace']}/{name} refused the priority change: "
            self._say_once(job_obj, REASON_PRIORITY_NOT_UPDATED, refused + (said or exc.reason))
            return
        workload.setdefault("spec", {}).update(change.patch["spec"])
        self._said.pop(meta["uid"], None)
        self.emit_event(job_obj, EVENT_NORMAL, change.reason, change.message)

    def forget(self, uid: str) -> None:
        self._said.pop(uid, None)

    def _say_once(self, job_obj: Obj, reason: str, message: str) -> None:
        uid = job_obj["metadata"]["uid"]
        if self._said.get(uid) != message:
            self._said[uid] = message
            self.emit_event(job_obj, EVENT_WARNING, reason, message)
