"""`submit`'s share of MultiKueue (docs/multikueue.md): a job sent to a LocalQueue whose
ClusterQueue dispatches to other clusters needs spec.managedBy: kueue.x-k8s.io/multikueue,
which cannot be set after creation. Kueue's webhooks set it for Kueue's own job kinds; for
ours the client sets it at submit, as Kueue's defaulting would (the operator refuses to
queue such a job without it, and says so)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dtjob_api.contract import MANAGED_BY_MULTIKUEUE
from dtjob_api.multikueue import Read, multikueue_route

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def with_managed_by(manifest: dict[str, Any], read: Read, namespace: str) -> dict[str, Any]:
    """The manifest, with spec.managedBy set where its queue leads to MultiKueue and it
    sets none."""
    queue = ((manifest.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    spec = manifest.get("spec") or {}
    if not queue or spec.get("managedBy") or not multikueue_route(read, namespace, queue):
        return manifest
    return {**manifest, "spec": {**spec, "managedBy": MANAGED_BY_MULTIKUEUE}}


def where_note(job: Mapping[str, Any], workloads: Sequence[Mapping[str, Any]]) -> str | None:
    """For `why` on the manager: where MultiKueue runs the job (the Workload's clusterName),
    or why it is not dispatched yet (the MultiKueue check's message); None for a job this
    cluster runs itself."""
    if (job.get("spec") or {}).get("managedBy") != MANAGED_BY_MULTIKUEUE:
        return None
    if not workloads:
        return "MultiKueue job: no Workload yet (the operator of this cluster makes it)"
    status = workloads[-1].get("status") or {}
    cluster = status.get("clusterName")
    if cluster:
        return (
            f"MultiKueue dispatched it to cluster {cluster}: its status is that cluster's, "
            f"copied here by Kueue (the pods and their logs are there)"
        )
    checks = [c for c in status.get("admissionChecks") or [] if c.get("message")]
    said = "; ".join(f"{c.get('name')} {c.get('state')}: {c.get('message')}" for c in checks)
    return "MultiKueue job, not dispatched yet" + (f" ({said})" if said else "")
