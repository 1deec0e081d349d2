"""Elastic jobs in the admission pass (docs/admission.md, "Elastic jobs"), pure: the size
a waiting elastic job is admitted at, the growth of running ones into room that stayed
free, and how far to shrink them for a higher-priority job (no further than it needs). decide.py
calls these; they record into its Decisions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from dtjob_operator.admission.fit import GangShape, Node, Quota, gang_shape, place, quota_shortfall
from dtjob_operator.admission.queue import in_queue_order
from dtjob_operator.admission.resources import add, subtract
from dtjob_operator.admission.snapshot import JobView, Snapshot
from dtjob_operator.admission.topology import TopologyRequest, place_gang
from dtjob_operator.naming import pod_name

if TYPE_CHECKING:
    from dtjob_operator.admission.decide import Decisions

# decide._fits_without: would the job fit with these jobs' pods and reservations gone?
FitsWithout = Callable[
    [JobView, Sequence[JobView], Quota | None, Sequence[Node], Sequence[str]], bool
]


def shrink(job: JobView, shrunk: Sequence[JobView], result: Decisions) -> None:
    """Record the resizes of `shrunk` (views from `shrinkable`, `held` cut by
    `least_shrinks`) for higher-priority `job`."""
    for v in shrunk:
        size = len(v.gang) - len(v.held)
        why = f"shrunk from {len(v.gang)} to {size} workers for higher-priority job {job.name}"
        result.resize[v.uid] = (size, why)
        result.keys[v.uid] = v.key


def shrinkable(job: JobView, admitted: Sequence[JobView]) -> list[JobView]:
    """Running elastic jobs of the namespace above their minimum, each as what shrinking it
    to its minimum frees: its top ranks' pods (the new gang is its first ranks)."""
    out = []
    for v in admitted:
        least = v.elastic_min
        if least is None or v.namespace != job.namespace or v.missing or v.draining:
            continue
        out.append(freeing(v, least))
    return out


def freeing(v: JobView, size: int) -> JobView:
    """`v` as what shrinking it to `size` workers frees: the pods of its ranks from `size`
    up (a pod of unknown node frees quota room only: never counted on a node it is not on)."""
    nodes = v.pod_nodes if len(v.pod_nodes) == len(v.gang) else (None,) * len(v.gang)
    top = [(node, p.requests) for node, p in zip(nodes, v.gang, strict=True)][size:]
    return replace(v, held=tuple(top))


def least_shrinks(
    shrunk: Sequence[JobView],
    fits: Callable[[Sequence[JobView]], bool],
    in_flight: Mapping[str, int] | None = None,
) -> list[JobView]:
    """`shrunk` (each at its minimum, and together enough: `fits(shrunk)`) with each job
    shrunk only as far as the higher-priority job needs: the largest size that still lets
    it fit, the highest-priority (then oldest) job kept largest first. Each shrink is a
    checkpoint-restart of the whole gang; the workers it keeps are not restarted again
    when it grows back after its cooldown.

    A shrink an earlier pass decided and the gang has not reached yet (`in_flight`: uid ->
    size) is kept as it is while it still makes room: re-decided on every pass, the size
    moved as the old pods went (the room they leave counts as free), 4 -> 2 and then
    4 -> 3, and the resize that was under way was replaced by another."""
    chosen = {v.uid: v for v in shrunk}
    kept = {
        v.uid: size
        for v in shrunk
        if (size := (in_flight or {}).get(v.uid)) is not None
        and len(v.gang) - len(v.held) <= size < len(v.gang)
    }
    trial = {**chosen, **{uid: freeing(chosen[uid], size) for uid, size in kept.items()}}
    if kept and fits(list(trial.values())):
        chosen = trial
    else:
        kept = {}
    order = sorted(shrunk, key=lambda v: (-v.priority, v.created, v.name))
    for v in order:
        if v.uid in kept:
            continue
        least = len(v.gang) - len(v.held)
        for size in range(len(v.gang) - 1, least, -1):
            trial = {**chosen, v.uid: freeing(v, size)}
            if fits(list(trial.values())):
                chosen[v.uid] = trial[v.uid]
                break
    return [chosen[v.uid] for v in shrunk]


def grow(
    snapshot: Snapshot,
    admitted: Sequence[JobView],
    waiting: set[str],
    quotas: dict[str, Quota],
    nodes: list[Node],
    result: Decisions,
    fits_without: FitsWithout,
) -> None:
    """Running elastic jobs below their maximum, in namespaces where nobody waits: the most
    pods each could run with now (its own pods' room counted free: the gang restarts
    whole). One that has had that room for its cooldown, and was not resized for as long,
    grows; the room it takes is taken off for the jobs after it."""
    now = snapshot.now
    for job in in_queue_order(j for j in admitted if j.elastic_max is not None):
        if job.elastic_max is None or job.namespace in waiting or job.missing or job.unscheduled:
            continue
        if job.resizable_at is None or job.uid in result.preempt:
            continue
        quota = quotas.get(job.namespace)
        # One more pod first: where that does not fit, no more does (the pods are alike),
        # which is what most passes find. Then up to the most that fit.
        size = len(job.gang)
        while size < job.elastic_max and fits_without(
            grown(job, size + 1), [job], quota, nodes, snapshot.topology_levels
        ):
            size += 1
        if size == len(job.gang):
            continue
        result.growable[job.uid] = size
        since = snapshot.growable_since.get(job.uid, now)
        if now >= job.resizable_at and (now - since).total_seconds() >= job.cooldown:
            why = f"grew from {len(job.gang)} to {size} workers into free capacity"
            result.resize[job.uid] = (size, why)
            result.keys[job.uid] = job.key
            extra = grown(job, size).gang[len(job.gang) :]
            if quota is not None:
                quota.room = subtract(quota.room, add(*(p.requests for p in extra)))
            place(list(extra), nodes)


def sized(
    job: JobView,
    quota: Quota | None,
    nodes: Sequence[Node],
    levels: Sequence[str],
    no_room: set[tuple[GangShape, TopologyRequest | None]],
) -> JobView:
    """An elastic job at the most pods in [elastic_min, len(gang)] that fit its quota room
    and have a placement now, else at its minimum (which then waits, is never admissible,
    or preempts, as any gang of that size). `no_room`: the pass's gang shapes that found no
    placement (nodes only lose room during a pass), added to."""
    least = job.elastic_min or len(job.gang)
    for size in range(len(job.gang), least, -1):
        pods = job.gang[:size]
        if quota is not None and quota_shortfall(add(*(p.requests for p in pods)), quota.room):
            continue
        shape = (gang_shape(pods), job.topology)
        if shape in no_room:
            continue
        if place_gang(pods, nodes, levels, job.topology) is not None:
            return first(job, size)
        no_room.add(shape)
    return first(job, least)


def grown(job: JobView, size: int) -> JobView:
    """The job as a gang of `size` workers: its pods, and more of the same."""
    more = size - len(job.gang)
    names = [pod_name(job.name, "worker", i) for i in range(len(job.gang), size)]
    return replace(
        job, gang=job.gang + (job.gang[-1],) * more, pod_names=job.pod_names + tuple(names)
    )


def first(job: JobView, size: int) -> JobView:
    """The job as a gang of its first `size` pods (ranks 0 .. size - 1)."""
    return replace(job, gang=job.gang[:size], pod_names=job.pod_names[:size])
