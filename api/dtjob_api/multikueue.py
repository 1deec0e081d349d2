"""Whether a LocalQueue leads to Kueue's MultiKueue, read from Kueue's objects through a
caller's reader (the operator's guarded client, or the user's for `kubectl dtj submit`):
LocalQueue -> its ClusterQueue -> the ClusterQueue's AdmissionChecks -> a check whose
controller is MultiKueue's. Pure but for the reader."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dtjob_api.contract import MANAGED_BY_MULTIKUEUE

# (namespace, or None for a cluster-scoped kind; plural; name) -> the object, or None.
Read = Callable[[str | None, str, str], Mapping[str, Any] | None]


def admission_check_names(cluster_queue: Mapping[str, Any]) -> list[str]:
    """The AdmissionChecks a ClusterQueue runs: v1beta2's admissionChecksStrategy, or the
    older plain list."""
    spec = cluster_queue.get("spec") or {}
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    names = [str(rule.get("name")) for rule in strategy if rule.get("name")]
    return names + [str(n) for n in spec.get("admissionChecks") or [] if n not in names]


def multikueue_route(read: Read, namespace: str, local_queue: str) -> tuple[str, str] | None:
    """(ClusterQueue, AdmissionCheck) where `local_queue` leads to MultiKueue, else None (a
    queue of this cluster, or one that does not exist)."""
    queue = read(namespace, "localqueues", local_queue) or {}
    cq_name = str((queue.get("spec") or {}).get("clusterQueue") or "")
    cluster_queue = read(None, "clusterqueues", cq_name) if cq_name else None
    if cluster_queue is None:
        return None
    for name in admission_check_names(cluster_queue):
        check = read(None, "admissionchecks", name) or {}
        if (check.get("spec") or {}).get("controllerName") == MANAGED_BY_MULTIKUEUE:
            return cq_name, name
    return None
