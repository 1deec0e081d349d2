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

from collections.abc import Sequence
from dataclasses import dataclass, field

from dtjob_operator.admission import messages
from dtjob_operator.admission.fit import (
    GangShape,
    Node,
    Quota,
    empty_nodes,
    gang_shape,
    place,
    place_on_empty,
    quota_shortfall,
)
from dtjob_operator.admission.preemption import select_victims
from dtjob_operator.admission.queue import in_queue_order, positions
from dtjob_operator.admission.resources import add, subtract
from dtjob_operator.admission.snapshot import JobView, Snapshot
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
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    """uid -> (namespace, name) of every job mentioned above."""

    @property
    def admitted(self) -> list[str]:
        return [uid for uid, v in self.verdicts.items() if v.admit]


def decide(snapshot: Snapshot, *, preemption: bool) -> Decisions:
    """The admission pass (see the module docstring)."""
    quotas = {ns: Quota(dict(q.hard), dict(q.room)) for ns, q in snapshot.quotas.items()}
    nodes = [Node(n.name, n.allocatable, dict(n.free), n.labels, n.taints) for n in snapshot.nodes]
    admitted = [j for j in snapshot.jobs if j.admitted]
    result = Decisions()
    # Restarted gangs first: what they held is gone, so they are placed on what is free
    # now before the reservations of gangs still being created.
    for job in in_queue_order(j for j in admitted if j.restarted is not None):
        if (why := _refit(job, quotas, nodes)) is not None:
            result.keys[job.uid] = job.key
            result.release[job.uid] = Verdict(False, why[0], messages.no_longer_fits(why[1]))
            result.release_generation[job.uid] = job.restarted or 0
        else:
            result.keys[job.uid] = job.key
            result.refit[job.uid] = job.restarted or 0
    for job in admitted:
        if job.restarted is not None:
            continue
        if job.namespace in quotas and job.missing:
            q = quotas[job.namespace]
            q.room = subtract(q.room, add(*(p.requests for p in job.missing)))
        pending = [*job.missing, *job.unscheduled]
        if pending and not place(pending, nodes):
            for pod in pending:  # a gang that cannot be placed still holds what it can
                place([pod], nodes)
    # A namespace where preempted (or timed-out) jobs still hold pods preempts nobody
    # else until they are gone: their pods are about to free the room.
    releasing = {j.namespace for j in snapshot.jobs if not j.admitted and j.held}

    ctx = _Pass(empty=empty_nodes(nodes))
    waiting: list[JobView] = []
    blocked: dict[str, str] = {}
    reasons: dict[str, tuple[str, str]] = {}
    for job in in_queue_order(j for j in snapshot.jobs if not j.admitted):
        result.keys[job.uid] = job.key
        reason, message = _judge(
            job, snapshot, quotas, nodes, blocked, releasing, preemption, admitted, result, ctx
        )
        if reason == REASON_ADMITTED:
            result.verdicts[job.uid] = Verdict(True, REASON_ADMITTED, message)
        else:
            waiting.append(job)
            reasons[job.uid] = (reason, message)
    for uid, position in positions(waiting).items():
        reason, message = reasons[uid]
        ns = result.keys[uid][0]
        result.verdicts[uid] = Verdict(
            False, reason, messages.with_position(position, ns, message), position
        )
    return result


@dataclass
class _Pass:
    """Memos of one pass. Nodes only lose room during a pass, so a gang shape that found no
    placement stays without one; whether a shape fits the empty nodes never changes."""

    empty: list[Node]
    fits_empty: dict[GangShape, bool] = field(default_factory=dict)
    no_room: set[GangShape] = field(default_factory=set)


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
    shape = gang_shape(job.gang)
    quota = quotas.get(job.namespace)
    if quota is not None and (short := quota_shortfall(need, quota.hard)):
        return REASON_INADMISSIBLE, messages.quota_never(job.namespace, need, quota, short)
    if shape not in ctx.fits_empty:
        ctx.fits_empty[shape] = place(job.gang, ctx.empty, commit=False)
    if not ctx.fits_empty[shape]:
        return REASON_INADMISSIBLE, messages.capacity_never(job.gang, nodes)
    if job.not_before is not None and snapshot.now < job.not_before:
        seconds = (job.not_before - snapshot.now).total_seconds()
        # Keep saying why it was released while it backs off (as preemption does).
        return REASON_PODS_READY_TIMEOUT, messages.backoff(seconds)
    if job.namespace in blocked:
        return REASON_WAITING_FOR_ADMISSION, messages.behind(*_blocker(blocked[job.namespace]))
    short = quota_shortfall(need, quota.room) if quota is not None else []
    if not short and shape not in ctx.no_room and place(job.gang, nodes):
        if quota is not None:
            quota.room = subtract(quota.room, need)
        return REASON_ADMITTED, "the whole gang fits; its pods may be created"
    if not short:
        ctx.no_room.add(shape)
    why = (
        messages.quota_short(job.namespace, need, quota, short)
        if quota is not None and short
        else messages.capacity_short(job.gang, nodes)
    )
    blocked[job.namespace] = f"{job.name}\0{why}"
    if preemption and job.can_preempt and job.namespace not in releasing:
        victims = select_victims(job, admitted, lambda vs: _fits_without(job, vs, quota, nodes))
        if victims:
            releasing.add(job.namespace)
            for v in victims:
                result.keys[v.uid] = v.key
                result.preempt[v.uid] = Verdict(
                    False, REASON_PREEMPTED, messages.preempted_by(job.name, job.priority)
                )
            return REASON_WAITING_FOR_ADMISSION, messages.preempting([v.name for v in victims])
    return REASON_WAITING_FOR_ADMISSION, why


def _refit(job: JobView, quotas: dict[str, Quota], nodes: list[Node]) -> tuple[str, str] | None:
    """None when the restarted gang still fits (its quota share and nodes are then taken);
    else the reason and message of why not."""
    quota = quotas.get(job.namespace)
    if quota is not None and (short := quota_shortfall(job.need, quota.hard)):
        return REASON_INADMISSIBLE, messages.quota_never(job.namespace, job.need, quota, short)
    short = quota_shortfall(job.need, quota.room) if quota is not None else []
    if short and quota is not None:
        return REASON_WAITING_FOR_ADMISSION, messages.quota_short(
            job.namespace, job.need, quota, short
        )
    if not place(job.gang, nodes):
        if not place_on_empty(job.gang, nodes):
            return REASON_INADMISSIBLE, messages.capacity_never(job.gang, nodes)
        return REASON_WAITING_FOR_ADMISSION, messages.capacity_short(job.gang, nodes)
    if quota is not None:
        quota.room = subtract(quota.room, job.need)
    return None


def _blocker(entry: str) -> tuple[str, str]:
    name, why = entry.split("\0", 1)
    return name, why


def _fits_without(
    job: JobView, victims: Sequence[JobView], quota: Quota | None, nodes: Sequence[Node]
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
    return place(job.gang, trial, commit=False)
