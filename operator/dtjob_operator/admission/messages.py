"""What a waiting job is told, in numbers (shown in its Admitted condition and events)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from dtjob_operator.admission.diagnose import never_fits, usable_nodes
from dtjob_operator.admission.fit import Node, PodDemand, Quota
from dtjob_operator.admission.resources import GPU, PODS, format_amount, is_gpu

MAX_NODES_LISTED = 8


def _unit(resource: str) -> str:
    return resource if resource != PODS else "pods"


def quota_short(namespace: str, need: Mapping[str, int], quota: Quota, short: Sequence[str]) -> str:
    """ "needs 8 nvidia.com/gpu, namespace team-a has 4 free of 16"."""
    parts = [
        f"needs {format_amount(need.get(r, 0), r)} {_unit(r)}, namespace {namespace} has "
        f"{format_amount(max(0, quota.room.get(r, 0)), r)} free of "
        f"{format_amount(quota.hard[r], r)}"
        for r in short
    ]
    return "; ".join(parts)


def quota_never(namespace: str, need: Mapping[str, int], quota: Quota, short: Sequence[str]) -> str:
    """The gang asks for more than the namespace's quota allows in all."""
    parts = [
        f"needs {format_amount(need.get(r, 0), r)} {_unit(r)}, more than the quota of "
        f"namespace {namespace} allows in all ({format_amount(quota.hard[r], r)})"
        for r in short
    ]
    return "can never be admitted: " + "; ".join(parts) + "; lower the request or raise the quota"


def accelerator(gang: Sequence[PodDemand]) -> str:
    """The device the gang's messages talk about: its GPUs (whatever the vendor or MIG
    profile), else its most-requested other extended resource, else nvidia.com/gpu."""
    totals: dict[str, int] = {}
    for pod in gang:
        for key, value in pod.requests.items():
            if "/" in key and value > 0:
                totals[key] = totals.get(key, 0) + value
    if not totals:
        return GPU
    gpu_like = [k for k in totals if is_gpu(k)]
    return max(gpu_like or totals, key=lambda k: (totals[k], k))


def _gang_shape(gang: Sequence[PodDemand], device: str) -> str:
    gpus = sorted((p.requests.get(device, 0) for p in gang), reverse=True)
    if gpus and gpus[0] > 0:
        if gpus[0] == gpus[-1]:
            return f"{len(gang)} pods of {gpus[0]} {device}"
        return f"{len(gang)} pods of up to {gpus[0]} {device} ({sum(gpus)} in all)"
    return f"{len(gang)} pods"


def _free_gpus(nodes: Sequence[Node], device: str) -> str:
    free = sorted((max(0, n.free.get(device, 0)) for n in nodes), reverse=True)
    shown = ", ".join(str(f) for f in free[:MAX_NODES_LISTED])
    more = f" and {len(free) - MAX_NODES_LISTED} more" if len(free) > MAX_NODES_LISTED else ""
    return f"free {device} per Ready node: {shown or 'none'}{more}"


def capacity_short(gang: Sequence[PodDemand], nodes: Sequence[Node]) -> str:
    """Quota allows it, but no placement of every pod exists on the Ready nodes now."""
    device = accelerator(gang)
    return f"needs {_gang_shape(gang, device)} placed on Ready nodes; {_free_gpus(nodes, device)}"


def capacity_never(gang: Sequence[PodDemand], nodes: Sequence[Node]) -> str:
    """Even empty, the Ready nodes could not hold the gang: the filter that excludes every
    node when there is one (diagnose.py), else the numbers."""
    if (why := never_fits(gang, nodes)) is not None:
        return f"can never be admitted: {why}"
    device = accelerator(gang)
    usable = usable_nodes(gang, nodes)  # not the nodes its selector or taints rule out
    biggest = max((n.allocatable.get(device, 0) for n in usable), default=0)
    return (
        f"can never be admitted: needs {_gang_shape(gang, device)} and the {len(usable)} Ready "
        f"nodes it may use could not hold them even if empty (largest node: {biggest} {device})"
    )


def _per_domain(
    gang: Sequence[PodDemand], nodes: Sequence[Node], level: str, device: str, free: bool
) -> dict[str, int]:
    """The device units of each domain of `level` on the nodes the gang may use: all of
    them, or (`free`) what is free now."""
    out: dict[str, int] = {}
    for node in usable_nodes(gang, nodes):
        if level in node.labels:
            units = max(0, node.free.get(device, 0)) if free else node.allocatable.get(device, 0)
            out[node.labels[level]] = out.get(node.labels[level], 0) + units
    return out


def topology_never(gang: Sequence[PodDemand], nodes: Sequence[Node], level: str) -> str:
    """Even empty, no domain of the required level could hold the gang."""
    device = accelerator(gang)
    domains = _per_domain(gang, nodes, level, device, free=False)
    if not domains:
        return (
            f"can never be admitted: spec.placement.topology.required names {level}, and no "
            f"Ready node it may use carries that label"
        )
    return (
        f"can never be admitted: needs {_gang_shape(gang, device)} inside one {level} "
        f"(spec.placement.topology.required), and none of the {len(domains)} could hold them "
        f"even if empty (largest: {max(domains.values())} {device})"
    )


def topology_short(gang: Sequence[PodDemand], nodes: Sequence[Node], level: str) -> str:
    """The required level has a domain that could hold the gang, but none with room now."""
    device = accelerator(gang)
    free = _per_domain(gang, nodes, level, device, free=True)
    roomiest = max(free.items(), key=lambda kv: (kv[1], kv[0]), default=("none", 0))
    return (
        f"needs {_gang_shape(gang, device)} inside one {level} (spec.placement.topology."
        f"required); no {level} has room for it now (roomiest: {roomiest[0]}, with "
        f"{roomiest[1]} {device} free on the nodes the pods may use)"
    )


def behind(blocker: str, reason: str) -> str:
    """Strict order within a namespace: a job that fits still waits for the one ahead."""
    return f"waiting behind job {blocker}, which is first in line ({reason})"


def backoff(seconds: float) -> str:
    """Re-queued after its pods were not ready in time (the count is in the status)."""
    return (
        f"re-queued because its pods were not all ready in time; eligible again in {seconds:.0f}s"
    )


def preempting(victims: Sequence[str]) -> str:
    """The job waits for lower-priority jobs it preempted to stop."""
    return f"preempting lower-priority job(s) {', '.join(victims)}; admitted once they stop"


def shrinking(jobs: Sequence[str]) -> str:
    """The job waits for lower-priority elastic jobs to shrink to their minimum."""
    return (
        f"shrinking lower-priority elastic job(s) {', '.join(jobs)} to their minimum; "
        f"admitted once their extra workers stop"
    )


def preempted_by(job: str, priority: int) -> str:
    """What a victim is told."""
    return (
        f"preempted by higher-priority job {job} (priority {priority}); the pods get SIGTERM "
        f"to checkpoint and the job is re-queued, resuming from its checkpoint"
    )


def keeping_off(nodes: Iterable[str], shown: int = 5) -> str:
    """Said after why a gang does not fit when it waits off the nodes it avoids."""
    names = sorted(nodes)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return (
        f"; it keeps off {', '.join(names[:shown])}{more} (nodes its restarts or other jobs' "
        "pointed at: kubectl dtj why), which it would use only if it could never fit elsewhere"
    )


def with_position(position: int, namespace: str, message: str) -> str:
    """Prefix the queue position."""
    return f"position {position} in the queue of namespace {namespace}: {message}"


def no_longer_fits(why: str) -> str:
    """A restarted gang that was admitted before and does not fit any more."""
    return f"the restarted gang no longer fits ({why}); it waits in the queue again"
