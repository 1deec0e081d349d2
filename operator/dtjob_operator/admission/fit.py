"""Does a whole gang fit? Quota room of its namespace and a placement of every pod.

Quota room is the hard limit minus what is used (the larger of the quota's own `used` and
the requests of the namespace's live pods: each lags the other a little) minus what jobs
already admitted still reserve (pods of their gang not created yet). Placement puts each
pod on some Ready node's free allocatable, first-fit-decreasing (largest pods first, nodes
in name order), honouring nodeSelector, taints, cordons and host ports in use; a sum of
free GPUs is not enough, since a 4-GPU pod cannot use two nodes with 2 free GPUs each.
Every resource a pod requests counts, extended ones (any GPU vendor, MIG profiles, RDMA,
EFA, hugepages) included: a node that does not list one has none of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dtjob_operator.admission.resources import (
    CPU,
    MEMORY,
    Resources,
    accelerator_units,
    add,
    node_covers,
    subtract,
)


@dataclass(frozen=True)
class PodDemand:
    """One pod of a gang as placement sees it."""

    requests: Mapping[str, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_name: str | None = None
    """The node an admission's placement pinned the pod to (its node affinity), if any."""
    host_ports: tuple[str, ...] = ()
    """The host ports it binds (resources.pod_host_ports): a node holds one such pod."""
    avoid: frozenset[str] = frozenset()
    """Nodes it goes to only when no other has room: the job's avoided nodes, the suspects
    of the cluster (policies/node_blame.py)."""


@dataclass
class Node:
    """A Ready, schedulable node: what is left of its allocatable, and what selects it."""

    name: str
    allocatable: Mapping[str, int]
    free: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()


@dataclass
class Quota:
    """The namespace's ResourceQuotas folded into one: the tightest hard limit per resource,
    and the room left under it."""

    hard: Resources
    room: Resources


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """The scheduler's rule for one NoSchedule/NoExecute taint."""
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True  # PreferNoSchedule never blocks placement
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if not tol.get("key"):
            if tol.get("operator") == "Exists":
                return True
            continue
        if tol.get("key") != taint.get("key"):
            continue
        if tol.get("operator") == "Exists" or tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def admits(node: Node, pod: PodDemand) -> bool:
    """Pin, selector and taints allow the pod on the node (its room aside)."""
    if pod.node_name is not None and pod.node_name != node.name:
        return False
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return all(tolerates(pod.tolerations, t) for t in node.taints)


def can_host(node: Node, pod: PodDemand, free: Mapping[str, int]) -> bool:
    """Pin, selector, taints and free resources all allow the pod on the node."""
    if not admits(node, pod):
        return False
    if any(free.get(port) for port in pod.host_ports):
        return False
    return node_covers(free, pod.requests)


def take(free: Mapping[str, int], pod: PodDemand) -> Resources:
    """A node's free room once the pod is on it: its requests off, its host ports taken."""
    left = subtract(free, pod.requests)
    for port in pod.host_ports:
        left[port] = 1
    return left


def _size(pod: PodDemand) -> tuple[int, int, int]:
    r = pod.requests
    return (accelerator_units(r), r.get(CPU, 0), r.get(MEMORY, 0))


def place(pods: Sequence[PodDemand], nodes: Sequence[Node], commit: bool = True) -> bool:
    """First-fit-decreasing placement of every pod. On success (and with `commit`) the
    nodes' free resources are reduced by the pods; on failure nothing changes."""
    # The room of the nodes taken so far (the others' is their own): a pass places every
    # admitted gang's pods, so copying every node's room per call cost O(gangs x nodes).
    free: dict[str, Resources] = {}
    for pod in sorted(pods, key=_size, reverse=True) if len(pods) > 1 else pods:
        if pod.node_name is not None:  # a pinned pod: that node or none
            pinned = next((n for n in nodes if n.name == pod.node_name), None)
            ok = pinned is not None and can_host(pinned, pod, free.get(pinned.name, pinned.free))
            target = pinned if ok else None
        else:
            # An avoided node only when no other has room (PodDemand.avoid): a preference. A
            # pod that avoids nothing scans the nodes once (a gang that does not fit is the
            # common case in a burst).
            target = next((n for n in nodes if n.name not in pod.avoid
                           and can_host(n, pod, free.get(n.name, n.free))), None)  # fmt: skip
            if target is None and pod.avoid:
                target = next((n for n in nodes if n.name in pod.avoid
                               and can_host(n, pod, free.get(n.name, n.free))), None)  # fmt: skip
        if target is None:
            return False
        free[target.name] = take(free.get(target.name, target.free), pod)
    if commit:
        for n in nodes:
            if n.name in free:
                n.free = free[n.name]
    return True


def place_on(pods: Sequence[PodDemand], names: Sequence[str], by_name: Mapping[str, Node]) -> bool:
    """Each pod on the node named for it (where an earlier pass placed it), all or none:
    on success the nodes' free resources are reduced by the pods. The same answer as
    place() of the pods pinned there (requests are never negative, so the pods fit one by
    one exactly when their sum fits), with one room check a node instead of one a pod: a
    pass reserves every admitted gang not created yet this way."""
    on: dict[str, list[PodDemand]] = {}
    for pod, name in zip(pods, names, strict=True):
        on.setdefault(name, []).append(pod)
    taken: dict[str, Resources] = {}
    for name, group in on.items():
        node = by_name.get(name)
        if node is None or not all(admits(node, pod) for pod in group):
            return False
        ports = [port for pod in group for port in pod.host_ports]
        if len(set(ports)) < len(ports) or any(node.free.get(port) for port in ports):
            return False  # a node holds one pod per host port
        need = add(*(pod.requests for pod in group))
        if not node_covers(node.free, need):
            return False
        taken[name] = subtract(node.free, need)
        taken[name].update(dict.fromkeys(ports, 1))
    for name, room in taken.items():
        by_name[name].free = room
    return True


def empty_nodes(nodes: Sequence[Node]) -> list[Node]:
    """The nodes as if they ran nothing."""
    return [Node(n.name, n.allocatable, dict(n.allocatable), n.labels, n.taints) for n in nodes]


def place_on_empty(pods: Sequence[PodDemand], nodes: Sequence[Node]) -> bool:
    """Could the gang be placed if the Ready nodes ran nothing else?"""
    return place(pods, empty_nodes(nodes), commit=False)


GangShape = tuple[tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...], str], ...]


def gang_shape(pods: Sequence[PodDemand]) -> GangShape:
    """A hashable key: gangs with the same shape fit (or not) on the same nodes."""
    return tuple(
        sorted(
            (
                tuple(sorted(p.requests.items())),
                tuple(sorted(p.node_selector.items())),
                repr((p.tolerations, sorted(p.avoid))),
            )
            for p in pods
        )
    )


def quota_shortfall(need: Mapping[str, int], limit: Mapping[str, int]) -> list[str]:
    """Resources of `need` above `limit` (resources the limit does not list are free)."""
    return [key for key, value in limit.items() if need.get(key, 0) > value]
