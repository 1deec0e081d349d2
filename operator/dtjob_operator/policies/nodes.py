"""Which nodes are lost: no kubelet there will confirm a pod's end.

A node is lost when its Ready condition is False or Unknown (the node lifecycle controller
sets Unknown ~40-50 s after the kubelet stops heartbeating), when it carries the
`node.kubernetes.io/out-of-service` taint (an admin's word that it is down, the same taint
Kubernetes' own pod GC honours), or when its Node object is gone. Pods terminating there
stay Terminating forever unless someone force-deletes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from datetime import datetime, timedelta
from typing import Any

from dtjob_operator.policies.pods import Pod, is_terminating, name_of, node_of
from dtjob_operator.policies.times import parse_time

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


def is_lost(node: Mapping[str, Any]) -> bool:
    """Not Ready (False or Unknown, or no Ready condition yet) or out of service."""
    taints = (node.get("spec") or {}).get("taints") or []
    if any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints):
        return True
    conditions = (node.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def lost_nodes(wanted: Iterable[str], nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Those of the `wanted` node names that are lost, or have no Node object."""
    by_name = {str(n["metadata"]["name"]): n for n in nodes}
    return frozenset(name for name in wanted if name not in by_name or is_lost(by_name[name]))


def force_deletes(
    pods: Iterable[Pod], lost: Set[str], now: datetime, margin: timedelta
) -> tuple[list[str], datetime | None]:
    """(pods to force-delete now, when the next one falls due): pods terminating on a lost
    node past their grace period (deletionTimestamp) plus `margin`. Force-deleting them lets
    a restarted gang reuse their names and DNS hostnames instead of waiting for ever; the
    margin covers a kubelet that is only slow (docs/lifecycle.md)."""
    due: list[str] = []
    later: list[datetime] = []
    for pod in pods:
        if not is_terminating(pod) or node_of(pod) not in lost:
            continue
        deadline = parse_time(pod["metadata"].get("deletionTimestamp"))
        if deadline is None or now >= deadline + margin:
            due.append(name_of(pod))
        else:
            later.append(deadline + margin)
    return sorted(due), min(later, default=None)
