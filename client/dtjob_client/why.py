"""Why a job is (not) running, gathered from what the operator and Kubernetes published:
the job's status and conditions (queue position, the admission message with its quota
numbers), its Events, its pods' waiting reasons and scheduler messages, and the namespace's
ResourceQuotas as Kubernetes reports them. Pure: JSON in, an explanation out.

Nothing is recomputed here: admission's own numbers (need, free, hard) are only in the
message it wrote, and the quotas are shown as their `status.hard` / `status.used`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dtjob_api.contract import DOMAIN, TRAINER_CONTAINER
from dtjob_api.status import REASON_STALLED
from dtjob_client.growth import growth_note
from dtjob_client.jobs import Job
from dtjob_client.stalls import (
    avoided_note,
    goodput_note,
    progress_note,
    ranks_note,
    stall_note,
)

LABEL_ROLE = f"{DOMAIN}/role"
LABEL_ROLE_INDEX = f"{DOMAIN}/role-index"
LABEL_GENERATION = f"{DOMAIN}/generation"
MAX_EVENTS = 10


@dataclass(frozen=True)
class ConditionInfo:
    """One condition of the job."""

    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str


@dataclass(frozen=True)
class QuotaUse:
    """One resource of one ResourceQuota, as Kubernetes reports it (status.hard, status.used)."""

    quota: str
    resource: str
    hard: str
    used: str


@dataclass(frozen=True)
class PodState:
    """A pod of the job's current gang that is not running and ready, and why."""

    pod: str
    member: str
    """`<role>-<index>`."""
    phase: str
    reason: str
    message: str


@dataclass(frozen=True)
class EventInfo:
    """An Event about the job or one of its pods."""

    object: str
    type: str
    reason: str
    message: str
    count: int
    time: str


@dataclass(frozen=True)
class Why:
    """The explanation `Client.why()` returns and `kubectl dtj why` prints."""

    name: str
    namespace: str
    phase: str
    reason: str | None
    """status.reason: the one-word why of the REASON column."""
    queue_position: int | None
    """status.queuePosition: place in the namespace's queue (1 is next)."""
    admission: ConditionInfo | None
    """The Admitted condition (its message has admission's numbers)."""
    conditions: tuple[ConditionInfo, ...] = ()
    quotas: tuple[QuotaUse, ...] = ()
    pods: tuple[PodState, ...] = ()
    events: tuple[EventInfo, ...] = ()
    requeues: int = 0
    preemptions: int = 0
    domain: str | None = None
    """status.admission.domain: the topology domain the gang was placed in."""
    resizes: int = 0
    """status.elastic.resizes: an elastic job's resizes."""
    last_resize: str | None = None
    """status.elastic.lastResizeReason."""
    growth: str | None = None
    """Why a running elastic job below its maximum has not grown (growth.growth_note)."""
    ready: str | None = None
    step: int | None = None
    total_steps: int | None = None
    stall: str | None = None
    """Why the gang restarts, restarted last or failed, when its training stalled."""
    progress: str | None = None
    """A Running job's step, when it last moved and its stall deadline (stalls.py)."""
    ranks: str | None = None
    """Stragglers and ranks that stopped stepping, from the trainer's heartbeats."""
    avoided: str | None = None
    """The nodes the job's next gangs keep off, until when and why (status.avoidedNodes)."""
    goodput: str | None = None
    """Where the job's GPU time went: training (goodput) and what was lost, by cause."""
    where: str | None = None
    """On a MultiKueue manager: the worker cluster that runs the job, or why none does yet."""


def explain(
    job: Job,
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    quotas: Iterable[Mapping[str, Any]],
    now: datetime | None = None,
    reported: Mapping[str, Any] | None = None,
) -> Why:
    """The explanation from the job, its pods, the Events of the namespace (only those about
    the job or its pods are kept) and the namespace's ResourceQuotas; `now` (the reader's
    clock) dates the last move of a Running job's step; `reported` is the trainer's own
    progress document (its ConfigMap), whose heartbeat summary names slow ranks."""
    st = job.status
    conditions = tuple(
        ConditionInfo(c.type, c.status, c.reason, c.message, c.lastTransitionTime)
        for c in st.conditions
    )
    admission = next((c for c in conditions if c.type == "Admitted"), None)
    gang = current_gang(pods)
    names = {job.name, *(str(p["metadata"]["name"]) for p in gang)}
    progress = st.progress
    shown = _events(events, names)
    stalls = [e.time for e in shown if e.reason == REASON_STALLED and e.object == job.name]
    return Why(
        name=job.name,
        namespace=job.namespace,
        phase=str(st.phase),
        reason=st.reason,
        queue_position=st.queuePosition,
        admission=admission,
        conditions=conditions,
        quotas=tuple(q for quota in quotas for q in quota_uses(quota)),
        pods=tuple(s for p in gang if (s := pod_state(p)) is not None),
        events=shown,
        requeues=st.admission.requeues if st.admission else 0,
        preemptions=st.admission.preemptions if st.admission else 0,
        domain=st.admission.domain if st.admission else None,
        resizes=st.elastic.resizes if st.elastic else 0,
        last_resize=st.elastic.lastResizeReason if st.elastic else None,
        growth=growth_note(job),
        ready=st.ready,
        step=progress.step if progress else None,
        total_steps=progress.totalSteps if progress else None,
        stall=stall_note(job, stalls[-1] if stalls else None),
        progress=progress_note(job, now),
        ranks=ranks_note(job, reported, gang),
        avoided=avoided_note(job),
        goodput=goodput_note(job, now),
    )


def current_gang(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of the newest gang generation (older ones are leftovers being torn down),
    in rank order: workers, stages, parameter servers, each by index."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    if not live:
        return []
    newest = max(_generation(p) for p in live)
    return sorted((p for p in live if _generation(p) == newest), key=_rank_key)


def member(pod: Mapping[str, Any]) -> str:
    """`<role>-<index>` of a pod, from its labels."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return f"{labels.get(LABEL_ROLE, '?')}-{labels.get(LABEL_ROLE_INDEX, '?')}"


def _generation(pod: Mapping[str, Any]) -> int:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_GENERATION, "0")
    return int(value) if str(value).isdigit() else 0


def _rank_key(pod: Mapping[str, Any]) -> tuple[int, int, str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    order = ("worker", "stage", "ps")
    role = labels.get(LABEL_ROLE, "")
    index = str(labels.get(LABEL_ROLE_INDEX, "0"))
    return (order.index(role) if role in order else 3, int(index) if index.isdigit() else 0, role)


def pod_state(pod: Mapping[str, Any]) -> PodState | None:
    """Why a pod is not Running and ready; None when it is (or finished successfully)."""
    status = pod.get("status") or {}
    phase = str(status.get("phase", "Unknown"))
    name = str(pod["metadata"]["name"])
    if phase == "Succeeded":
        return None
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if phase == "Running" and (conditions.get("Ready") or {}).get("status") == "True":
        return None
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False":
        return PodState(
            name, member(pod), phase, str(scheduled.get("reason") or "Unschedulable"),
            str(scheduled.get("message") or ""),
        )  # fmt: skip
    for cs in _container_statuses(status):
        state = cs.get("state") or {}
        for key in ("waiting", "terminated"):
            detail = state.get(key)
            if detail and detail.get("reason"):
                message = str(detail.get("message") or "")
                if key == "terminated":
                    message = f"exit code {detail.get('exitCode')}" + (
                        f": {message}" if message else ""
                    )
                return PodState(name, member(pod), phase, str(detail["reason"]), message)
    return PodState(name, member(pod), phase, phase, str(status.get("message") or ""))


def _container_statuses(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    # The trainer first: its state is the one that matters for the job.
    statuses = [*(status.get("initContainerStatuses") or []),
                *(status.get("containerStatuses") or [])]  # fmt: skip
    return sorted(statuses, key=lambda cs: cs.get("name") != TRAINER_CONTAINER)


def quota_uses(quota: Mapping[str, Any]) -> list[QuotaUse]:
    """Every resource a ResourceQuota limits, with Kubernetes' own used figure."""
    name = str((quota.get("metadata") or {}).get("name", ""))
    status = quota.get("status") or {}
    hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
    used = status.get("used") or {}
    return [QuotaUse(name, r, str(hard[r]), str(used.get(r, "?"))) for r in sorted(hard)]


def _events(events: Iterable[Mapping[str, Any]], names: set[str]) -> tuple[EventInfo, ...]:
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") in names]
    mine.sort(key=_event_time)
    return tuple(
        EventInfo(
            object=str(e["involvedObject"]["name"]),
            type=str(e.get("type") or ""),
            reason=str(e.get("reason") or ""),
            message=str(e.get("message") or "").strip(),
            count=int(e.get("count") or 1),
            time=_event_time(e),
        )
        for e in mine[-MAX_EVENTS:]
    )


def _event_time(event: Mapping[str, Any]) -> str:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if event.get(key):
            return str(event[key])
    return str((event.get("metadata") or {}).get("creationTimestamp") or "")


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def queue_summary(why: Why) -> str | None:
    """`queued 3rd in namespace team-a: <admission's message>`; the message's own
    `position N in the queue of namespace X: ` prefix is not repeated."""
    if why.queue_position is None:
        return None
    head = f"queued {ordinal(why.queue_position)} in namespace {why.namespace}"
    message = why.admission.message if why.admission else ""
    prefix = f"position {why.queue_position} in the queue of namespace {why.namespace}: "
    if message.startswith(prefix):
        message = message[len(prefix) :]
    return f"{head}: {message}" if message else head
