"""One admission pass: which waiting jobs start now, where the others stand, who is
preempted. Pure: a Snapshot in, Decisions out.

0. A restarted gang (admitted, its old pods gone, its new ones not created yet) is checked
   against what is free now, before anything else is placed: if it no longer fits (a node
   was lost or cordoned, the quota lowered) it is released back to the queue, keeping its
   place there; if it fits, the pass says so (`refit`), and only then is it created.
1. What admitted jobs still reserve (gang pods not created, or created but not scheduled)
   comes off their namespace's quota room and is placed on the nodes first.
2. Waiting jobs are taken in queue order (priority, then creation time). A job that can
   never fit (more than its quota's hard limit, or more than the Ready nodes could hold if
   empty) says so and is skipped: it blocks nobody. A job in its re-queue backoff waits
   without blocking. Otherwise, if the whole gang fits the quota room and has a placement,
   it is admitted and its requests are taken off the room and the nodes; if not, it
   blocks the rest of its namespace (strict order, so a large gang is not starved by
   small ones), after trying to preempt lower-priority jobs of its namespace.
3. Every job still waiting gets its position within its namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dtjob_operator.admission import elastic, messages
from dtjob_operator.admission.fit import (
    GangShape,
    Node,
    PodDemand,
    Quota,
    empty_nodes,
    gang_shape,
    place,
    place_on,
    place_on_empty,
    quota_shortfall,
)
from dtjob_operator.admission.preemption import select_victims, select_victims_in_a_domain
from dtjob_operator.admission.queue import in_queue_order, positions
from dtjob_operator.admission.resources import add, subtract
from dtjob_operator.admission.snapshot import JobView, Snapshot
from dtjob_operator.admission.topology import (
    TopologyRequest,
    avoided_nodes,
    commit,
    describe,
    on_nodes,
    place_gang,
)
from dtjob_operator.constants import (
    REASON_ADMITTED,
    REASON_INADMISSIBLE,
    REASON_PODS_READY_TIMEOUT,
    REASON_PREEMPTED,
    REASON_WAITING_FOR_ADMISSION,
)


@dataclass(frozen=True)
class Verdict:
    """What the pass decided for one job."""

    admit: bool
    reason: str
    message: str
    position: int | None = None


@dataclass
class Decisions:
    """The pass's result, by job uid."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    """Jobs that were waiting: admitted now, or still waiting (with position)."""
    preempt: dict[str, Verdict] = field(default_factory=dict)
    """Admitted jobs to suspend so that a higher-priority job fits."""
    release: dict[str, Verdict] = field(default_factory=dict)
    """Admitted restarted gangs, not created yet, that no longer fit: back to the queue."""
    release_generation: dict[str, int] = field(default_factory=dict)
    """uid -> the gang generation a release was decided for."""
    refit: dict[str, int] = field(default_factory=dict)
    """Admitted restarted gangs, not created yet, that still fit: uid -> the gang generation
    this pass checked (with its old pods gone). Only then does the reconcile create it."""
    domains: dict[str, str] = field(default_factory=dict)
    """uid -> where a gang placed whole in this pass went (topology.describe)."""
    sizes: dict[str, int] = field(default_factory=dict)
    """uid -> the pods an elastic job was admitted with (its largest size that fits)."""
    growable: dict[str, int] = field(default_factory=dict)
    """uid -> the most pods a running elastic job could grow to now (nobody of its
    namespace waiting); it grows once that has held for its cooldown."""
    resize: dict[str, tuple[int, str]] = field(default_factory=dict)
    """uid -> (pods, why): running elastic jobs to resize."""
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    """uid -> (namespace, name) of every job mentioned above."""
    placements: dict[str, dict[str, str]] = field(default_factory=dict)
    """uid -> pod name -> node, for the pods this pass placed and that do not exist yet
    (admitted now, reserved by an admitted gang, or a refitted restarted gang): the pods
    are created pinned there (docs/design/topology-admission.md)."""

    @property
    def admitted(self) -> list[str]:
        return [uid for uid, v in self.verdicts.items() if v.admit]


def decide(snapshot: Snapshot, *, preemption: bool) -> Decisions:
    """The admission pass (see the module docstring)."""
    quotas = {ns: Quota(dict(q.hard), dict(q.room)) for ns, q in snapshot.quotas.items()}
    nodes = [Node(n.name, n.allocatable, dict(n.free), n.labels, n.taints) for n in snapshot.nodes]
    by_name = {n.name: n for n in nodes}
    admitted = [j for j in snapshot.jobs if j.admitted]
    levels = snapshot.topology_levels
    result = Decisions()
    # Admitted gangs still being created, first those kept where an earlier pass placed
    # them: their pods may be being created right now, pinned to those nodes.
    unkept: list[JobView] = []
    for job in admitted:
        if job.restarted is not None:
            continue
        if job.namespace in quotas and job.missing:
            q = quotas[job.namespace]
            q.room = subtract(q.room, add(*(p.requests for p in job.missing)))
        # Created pods wait where they were pinned (or anywhere they fit, if they were not);
        # the pods not created yet are placed as a gang, and will be created there.
        if job.unscheduled and not place(list(job.unscheduled), nodes):
            for pod in job.unscheduled:  # a gang that cannot be placed still holds what it can
                place([pod], nodes)
        if job.missing:
            where = _kept(job, snapshot.kept.get(job.uid) or {}, by_name)
            if where is None:
                unkept.append(job)
            else:
                result.placements[job.uid], result.keys[job.uid] = where, job.key
    # Then restarted gangs (a failure, a resize), whose old pods are gone: where they were
    # if that still fits, else on what is free now. Before the reservations placed afresh
    # (no pod of those is being created), so those cannot push a restarted gang out.
    for job in in_queue_order(j for j in admitted if j.restarted is not None):
        result.keys[job.uid] = job.key
        kept = snapshot.kept.get(job.uid) or {}
        if (why := _refit(job, kept, quotas, nodes, by_name, levels, result)) is not None:
            result.release[job.uid] = Verdict(False, why[0], messages.no_longer_fits(why[1]))
            result.release_generation[job.uid] = job.restarted or 0
        else:
            result.refit[job.uid] = job.restarted or 0
    for job in unkept:
        placed = _placed(job.missing, job.missing_names, nodes, levels, job.topology)
        if placed is not None:
            result.placements[job.uid], result.keys[job.uid] = placed[0], job.key
        else:
            for pod in job.missing:
                place([pod], nodes)
    # A namespace where preempted (or timed-out) jobs still hold pods preempts nobody
    # else until they are gone: their pods are about to free the room.
    # So does one where an admitted gang is being replaced (a resize, a restart): until its
    # old pods are gone, what it holds is in flux.
    releasing = {j.namespace for j in snapshot.jobs if j.held and (not j.admitted or j.draining)}

    ctx = _Pass(empty=empty_nodes(nodes))
    waiting: list[JobView] = []
    blocked: dict[str, str] = {}
    reasons: dict[str, tuple[str, str]] = {}
    for job in in_queue_order(j for j in snapshot.jobs if not j.admitted):
        result.keys[job.uid] = job.key
        if job.elastic_min is not None and job.namespace in blocked:
            job = elastic.first(job, job.elastic_min)  # waits behind the blocker at any size
        elif job.elastic_min is not None:
            quota = quotas.get(job.namespace)
            job = elastic.sized(job, quota, nodes, snapshot.topology_levels, ctx.no_room)
        reason, message = _judge(
            job, snapshot, quotas, nodes, blocked, releasing, preemption, admitted, result, ctx
        )
        if reason == REASON_ADMITTED:
            result.verdicts[job.uid] = Verdict(True, REASON_ADMITTED, message)
            if job.elastic_min is not None:
                result.sizes[job.uid] = len(job.gang)
        else:
            waiting.append(job)
            reasons[job.uid] = (reason, message)
    # A job that can never be admitted could not use the room either.
    hopeful = {j.namespace for j in waiting if reasons[j.uid][0] != REASON_INADMISSIBLE}
    elastic.grow(snapshot, admitted, hopeful, quotas, nodes, result, _fits_without)
    for uid, position in positions(waiting).items():
        reason, message = reasons[uid]
        ns = result.keys[uid][0]
        result.verdicts[uid] = Verdict(
            False, reason, messages.with_position(position, ns, message), position
        )
    return result


# Gangs of one shape and one topology request fit (or not) on the same nodes.
ShapeKey = tuple[GangShape, TopologyRequest | None]


@dataclass
class _Pass:
    """Memos of one pass. Nodes only lose room during a pass, so a gang shape that found no
    placement stays without one; whether a shape fits the empty nodes never changes."""

    empty: list[Node]
    fits_empty: dict[ShapeKey, bool] = field(default_factory=dict)
    fits_off_avoided: dict[ShapeKey, bool] = field(default_factory=dict)
    no_room: set[ShapeKey] = field(default_factory=set)


def _judge(
    job: JobView,
    snapshot: Snapshot,
    quotas: dict[str, Quota],
    nodes: list[Node],
    blocked: dict[str, str],
    releasing: set[str],
    preemption: bool,
    admitted: Sequence[JobView],
    result: Decisions,
    ctx: _Pass,
) -> tuple[str, str]:
    need = job.need
    levels = snapshot.topology_levels
    shape = (gang_shape(job.gang), job.topology)
    quota = quotas.get(job.namespace)
    if quota is not None and (short := quota_shortfall(need, quota.hard)):
        return REASON_INADMISSIBLE, messages.quota_never(job.namespace, need, quota, short)
    if shape not in ctx.fits_empty:
        ctx.fits_empty[shape] = place_gang(job.gang, ctx.empty, levels, job.topology) is not None
    if not ctx.fits_empty[shape]:
        if job.topology is not None and job.topology.required and place_on_empty(job.gang, nodes):
            return REASON_INADMISSIBLE, messages.topology_never(job.gang, nodes, job.topology.level)
        return REASON_INADMISSIBLE, messages.capacity_never(job.gang, nodes)
    if job.not_before is not None and snapshot.now < job.not_before:
        seconds = (job.not_before - snapshot.now).total_seconds()
        # Keep saying why it was released while it backs off (as preemption does).
        return REASON_PODS_READY_TIMEOUT, messages.backoff(seconds)
    if job.namespace in blocked:
        return REASON_WAITING_FOR_ADMISSION, messages.behind(*_blocker(blocked[job.namespace]))
    short = quota_shortfall(need, quota.room) if quota is not None else []
    usable = _off_avoided(job, nodes, levels, ctx.fits_off_avoided.get(shape))
    ctx.fits_off_avoided[shape] = usable is not nodes
    placed = (
        _placed(job.gang, job.pod_names, usable, levels, job.topology)
        if not short and shape not in ctx.no_room else None
    )  # fmt: skip
    if placed is not None:
        result.placements[job.uid], result.domains[job.uid] = placed
        if quota is not None:
            quota.room = subtract(quota.room, need)
        return REASON_ADMITTED, f"the whole gang fits, placed in {placed[1]}"
    if not short:
        ctx.no_room.add(shape)
    if quota is not None and short:
        why = messages.quota_short(job.namespace, need, quota, short)
    elif job.topology is not None and job.topology.required:
        why = messages.topology_short(job.gang, usable, job.topology.level)
    else:
        why = messages.capacity_short(job.gang, usable)
    if usable is not nodes:
        why += messages.keeping_off(avoided_nodes(job.gang))
    blocked[job.namespace] = f"{job.name}\0{why}"
    if preemption and job.can_preempt and job.namespace not in releasing:

        def fits(vs: Sequence[JobView]) -> bool:
            return _fits_without(job, vs, quota, usable, levels)

        # Workers above their minimum go before any job is stopped whole: shrinks alone if
        # they suffice, else whole victims on top of every shrink, then the shrinks needed.
        partials = elastic.shrinkable(job, admitted)
        shrunk = select_victims(job, partials, fits)
        if shrunk:
            releasing.add(job.namespace)
            kept = snapshot.resizing
            elastic.shrink(job, elastic.least_shrinks(shrunk, fits, kept), result)
            return REASON_WAITING_FOR_ADMISSION, messages.shrinking([v.name for v in shrunk])

        def fits_shrunk(vs: Sequence[JobView]) -> bool:
            stopped = {v.uid for v in vs}
            return fits([*vs, *(p for p in partials if p.uid not in stopped)])

        if job.topology is not None and job.topology.required:
            domains = _domains(nodes, job.topology.level)
            victims = select_victims_in_a_domain(job, admitted, domains, fits_shrunk)
        else:
            victims = select_victims(job, admitted, fits_shrunk)
        if victims:
            stopped = {v.uid for v in victims}
            needed = [p for p in partials if p.uid not in stopped]
            for p in list(needed):
                if fits([*victims, *(q for q in needed if q is not p)]):
                    needed.remove(p)
            needed = elastic.least_shrinks(
                needed, lambda vs: fits([*victims, *vs]), snapshot.resizing
            )
            elastic.shrink(job, needed, result)
            releasing.add(job.namespace)
            for v in victims:
                result.keys[v.uid] = v.key
                result.preempt[v.uid] = Verdict(
                    False, REASON_PREEMPTED, messages.preempted_by(job.name, job.priority)
                )
            return REASON_WAITING_FOR_ADMISSION, messages.preempting([v.name for v in victims])
    return REASON_WAITING_FOR_ADMISSION, why


def _refit(
    job: JobView,
    kept: dict[str, str],
    quotas: dict[str, Quota],
    nodes: list[Node],
    by_name: Mapping[str, Node],
    levels: Sequence[str],
    result: Decisions,
) -> tuple[str, str] | None:
    """None when the restarted gang still fits (its quota share and nodes are then taken,
    and its placement recorded); else the reason and message of why not."""
    quota = quotas.get(job.namespace)
    if quota is not None and (short := quota_shortfall(job.need, quota.hard)):
        return REASON_INADMISSIBLE, messages.quota_never(job.namespace, job.need, quota, short)
    short = quota_shortfall(job.need, quota.room) if quota is not None else []
    if short and quota is not None:
        return REASON_WAITING_FOR_ADMISSION, messages.quota_short(
            job.namespace, job.need, quota, short
        )
    where = _pinned(job.gang, job.pod_names, kept, by_name)
    usable = _off_avoided(job, nodes, levels)
    placed = (
        (where, describe(on_nodes(list(where.values()), nodes, levels)))
        if where is not None
        else _placed(job.gang, job.pod_names, usable, levels, job.topology)
    )
    if placed is None:
        if not place_on_empty(job.gang, nodes):
            return REASON_INADMISSIBLE, messages.capacity_never(job.gang, nodes)
        why = messages.capacity_short(job.gang, usable)
        if usable is not nodes:
            why += messages.keeping_off(avoided_nodes(job.gang))
        return REASON_WAITING_FOR_ADMISSION, why
    result.placements[job.uid], result.domains[job.uid] = placed
    if quota is not None:
        quota.room = subtract(quota.room, job.need)
    return None


def _kept(job: JobView, kept: dict[str, str], by_name: Mapping[str, Node]) -> dict[str, str] | None:
    """The missing pods reserved where an earlier pass placed them, if all still fit there
    (a later pass must not move them: another gang may have been placed around them)."""
    return _pinned(job.missing, job.missing_names, kept, by_name)


def _pinned(
    pods: Sequence[PodDemand],
    names: Sequence[str],
    kept: dict[str, str],
    by_name: Mapping[str, Node],
) -> dict[str, str] | None:
    """The pods taken on the nodes `kept` names for them, if every one has a node there and
    they all still fit; else None (and nothing taken). Not a node a pod now avoids (a
    restarted gang's node that its failure pointed at): the gang is placed anew, where the
    avoided node comes last."""
    if not names or any(name not in kept for name in names):
        return None
    if any(kept[name] in pod.avoid for pod, name in zip(pods, names, strict=True)):
        return None
    if not place_on(pods, [kept[name] for name in names], by_name):
        return None
    return {name: kept[name] for name in names}


def _off_avoided(
    job: JobView, nodes: list[Node], levels: Sequence[str], known: bool | None = None
) -> list[Node]:
    """The nodes the gang may go to now. The nodes it avoids (PodDemand.avoid: those its
    own restarts pointed at, the cluster's suspects) are left out whenever the gang could
    be placed on the others were they empty: it then waits for room there rather than go
    back to a node that made a gang sick (the sick-node trace's goodput, bench/sick_nodes.py,
    is what this buys). When it never could, they are all kept, the avoided ones tried
    last (fit.place, topology.py): an avoidance never strands a job. `known`: that answer
    from an earlier gang of the same shape in the pass (it depends on the shape only)."""
    avoided = avoided_nodes(job.gang)
    if not avoided or known is False:
        return nodes
    rest = [n for n in nodes if n.name not in avoided]
    if known is None and place_gang(job.gang, empty_nodes(rest), levels, job.topology) is None:
        return nodes
    return rest


def _placed(
    pods: Sequence[PodDemand],
    names: Sequence[str],
    nodes: Sequence[Node],
    levels: Sequence[str],
    request: TopologyRequest | None,
) -> tuple[dict[str, str], str] | None:
    """The pods placed by topology (topology.py) and taken off the nodes: name -> node, and
    the domain they went to (topology.describe)."""
    placement = place_gang(pods, nodes, levels, request)
    if placement is None:
        return None
    commit(placement, pods, nodes)
    keys = names if len(names) == len(pods) else [str(i) for i in range(len(pods))]
    return dict(zip(keys, placement.nodes, strict=True)), describe(placement)


def _blocker(entry: str) -> tuple[str, str]:
    name, why = entry.split("\0", 1)
    return name, why


def _domains(nodes: Sequence[Node], level: str) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for node in nodes:
        if level in node.labels:
            out.setdefault(node.labels[level], set()).add(node.name)
    return {value: frozenset(names) for value, names in out.items()}


def _fits_without(
    job: JobView,
    victims: Sequence[JobView],
    quota: Quota | None,
    nodes: Sequence[Node],
    levels: Sequence[str] = (),
) -> bool:
    """Would the job fit if the victims' pods and reservations were gone?"""
    if quota is not None:
        held = [r for v in victims for _, r in v.held]
        freed = add(*held, *(p.requests for v in victims for p in v.missing))
        room = {k: value + freed.get(k, 0) for k, value in quota.room.items()}
        if quota_shortfall(job.need, room):
            return False
    freed_on: dict[str, dict[str, int]] = {}
    for v in victims:
        for node, requests in v.held:
            if node:
                freed_on[node] = add(freed_on.get(node, {}), requests)
    trial = [
        Node(n.name, n.allocatable, add(n.free, freed_on.get(n.name, {})), n.labels, n.taints)
        for n in nodes
    ]
    return place_gang(job.gang, trial, levels, job.topology) is not None
