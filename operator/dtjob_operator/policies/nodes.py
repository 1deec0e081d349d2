"""Which nodes are lost: no kubelet there will confirm a pod's end.

A node is lost when its Ready condition is False or Unknown (the node lifecycle controller
sets Unknown ~40-50 s after the kubelet stops heartbeating), when it carries the
`node.kubernetes.io/out-of-service` taint (an admin's word that it is down, the same taint
Kubernetes' own pod GC honours), or when its Node object is gone. Pods terminating there
stay Terminating forever unless someone force-deletes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from datetime import datetime, timedelta
from typing import Any

from dtjob_api.status import JobPhase
from dtjob_operator.policies.pods import Pod, generation_of, is_terminating, name_of, node_of
from dtjob_operator.policies.times import parse_time

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
# Nodes a pass reads from the API server when the cache calls a terminating pod's node
# Ready (`confirmed_lost`): a user's deletion touches one pod or a few, a bound keeps a
# mass deletion from costing a GET per node per pass.
LIVE_NODE_READS = 8
# Only then: during a restart and after the end the operator's own deletions make every
# pod terminate, and no verdict waits on their nodes.
GANG_UP_PHASES = (JobPhase.STARTING.value, JobPhase.RUNNING.value)


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


def confirmed_lost(
    doubtful: Iterable[str],
    read: Callable[[str], Mapping[str, Any] | None],
    limit: int = LIVE_NODE_READS,
) -> frozenset[str]:
    """Those of the `doubtful` node names (Ready in the operator's cache) that the API
    server says are lost or gone, reading at most `limit` of them (in name order).

    A user deletes a pod on a node that has just gone NotReady: the pod's watch event can
    reach the operator before the node's, and judged on the cache the pod would be a
    counted failure (deleted while the gang ran) instead of a disruption (node lost). The
    verdict must not depend on which watch stream was faster."""
    return frozenset(
        name for name in sorted(doubtful)[:limit] if (node := read(name)) is None or is_lost(node)
    )


def vanished_members(gone: Iterable[Pod], pods: Iterable[Pod], generation: int) -> list[Pod]:
    """The last states (gone_pods.py) of the members of gang `generation` that are no
    longer there: a pod of that generation whose name no present pod bears. Those of older
    generations were deleted by a restart, and judged then."""
    present = {name_of(p) for p in pods}
    return [p for p in gone if generation_of(p) == generation and name_of(p) not in present]


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
