"""The lifecycle planner's working state and the toolkit its decisions share. Pure.

lifecycle.py holds the decisions, in the order its docstring gives; this module holds what
they have in common: the state one planning pass accumulates (phase, conditions, children to
create, pods to delete, events, requeues), the helpers that read the prior status and record
conditions, events and requeues, and `_render`, which turns the state into the Plan. Kept
apart so that each file reads in one sitting."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from dtjob_api.goodput import Ledger, gpus_of
from dtjob_api.spec import DistributedTrainingJobSpec, RunPolicy
from dtjob_api.status import JobPhase
from dtjob_operator.admission.placement import keep_off, place
from dtjob_operator.builders import (
    Job,
    Manifest,
    build_pods,
    build_support_objects,
    child_key,
    support_keys,
)
from dtjob_operator.constants import (
    CONDITION_CHECKPOINT_STORAGE,
    CONDITION_RESTARTING,
    CONDITION_RUNNING,
    CONDITION_SUSPENDED,
    EVENT_WARNING,
    REASON_ADMISSION_WITHDRAWN,
    REASON_CHILD_CONFLICT,
    REASON_CREATE_FAILED,
    REASON_DEACTIVATED,
    REASON_PODS_NOT_READY,
    REASON_PREEMPTED,
)
from dtjob_operator.kueue.multikueue import origin
from dtjob_operator.naming import pod_name
from dtjob_operator.plan_types import Event, Observed, Plan
from dtjob_operator.policies import node_blame
from dtjob_operator.policies.checkpoint_storage import StorageVerdict, judge_checkpoint_storage
from dtjob_operator.policies.create_errors import CONFLICT, CreateError
from dtjob_operator.policies.deadline import deadline_of
from dtjob_operator.policies.finished import lenient_run_policy
from dtjob_operator.policies.goodput import Restart, advance, lost_work
from dtjob_operator.policies.nodes import force_deletes, vanished_members
from dtjob_operator.policies.pods import Pod, name_of, node_of
from dtjob_operator.policies.times import parse_time, seconds_until
from dtjob_operator.policies.waiting import why_not_running
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.status import ConditionUpdate, StatusDecision, compute_status

# The Suspended reasons of a job whose gang the admission stopped (lifecycle, step 4b).
STOPPED_BY_ADMISSION = frozenset({REASON_PREEMPTED, REASON_DEACTIVATED, REASON_ADMISSION_WITHDRAWN})


class PlanState:
    """One planning pass's state and toolkit; lifecycle._Planner adds the decisions."""

    # Set by _Planner.run() once the spec is valid; declared for the helpers that build pods.
    job: Job

    def __init__(self, observed: Observed, settings: OperatorSettings) -> None:
        self.o = observed
        self.settings = settings
        self.now = observed.now
        self.meta: Mapping[str, Any] = observed.job.get("metadata") or {}
        self.prior: Mapping[str, Any] = observed.job.get("status") or {}
        self.prior_phase = _phase(self.prior.get("phase"))
        self.phase = self.prior_phase
        self.restarts = int(self.prior.get("restarts") or 0)
        # A status written before countedRestarts existed counted every restart.
        counted = self.prior.get("countedRestarts")
        self.counted_restarts = int(counted) if counted is not None else self.restarts
        self.start_time = parse_time(self.prior.get("startTime"))
        self.completion_time = parse_time(self.prior.get("completionTime"))
        self.last_restart_time = parse_time(self.prior.get("lastRestartTime"))
        self.spec: DistributedTrainingJobSpec | None = None
        self.gang: list[Pod] = []
        self.conditions: list[ConditionUpdate] = []
        self.create: list[Manifest] = []
        self.delete: set[str] = set()
        self.delete_grace: int | None = None  # Plan.delete_grace_seconds
        self.events: list[Event] = []
        self.requeue: list[float] = []
        self.queue_position: int | None = None
        self.admission: dict[str, Any] = dict(self.prior.get("admission") or {})
        # Who holds the job (admission/router.py hands a job over by it).
        self.admission["backend"] = observed.admission.by.value
        self.elastic: dict[str, Any] = dict(self.prior.get("elastic") or {})
        self.storage: StorageVerdict | None = None
        # status.progressWatch (plan_stall.py): set only while Running, so any other
        # phase drops it and the next Running gang starts a new watch.
        self.progress_watch: dict[str, Any] | None = None
        # status.avoidedNodes less the expired (plan_nodes.py): the next gangs keep off them.
        self.avoided = node_blame.read(self.prior.get("avoidedNodes"), self.now)
        # status.lastFailure: where the failure that decided the last restart came from.
        last = self.prior.get("lastFailure")
        self.last_failure: dict[str, str] | None = dict(last) if isinstance(last, dict) else None
        # What a gang restart of this pass threw away, for the goodput ledger (goodput.py).
        self.restart_loss: Restart | None = None
        self._built: dict[int, list[Manifest]] = {}

    # -- helpers ---------------------------------------------------------------------------

    def _note_restart_loss(self, stalled: float = 0.0, resize: bool = False) -> None:
        """What this pass's gang restart throws away, for the goodput ledger: the steps
        since the last checkpoint (none for a resize: it checkpoints first), and the time
        the step stood still before a stall."""
        progress = self.o.progress or self.prior.get("progress")
        sps = (self.prior.get("progressWatch") or {}).get("secondsPerStep")
        lost = 0.0 if resize else lost_work(progress, sps)
        self.restart_loss = Restart(lost_work=lost, stalled=stalled, resize=resize)

    def _say_create_retry(self, error: CreateError) -> None:
        """A transient refusal: the job keeps its phase and says why it is not running;
        the executor retries with backoff. One event per new reason, not one per pass."""
        message = error.describe()
        reason = REASON_CHILD_CONFLICT if error.code == CONFLICT else REASON_CREATE_FAILED
        prior = self._prior_condition(CONDITION_RUNNING)
        self._condition(CONDITION_RUNNING, False, reason, message)
        if prior.get("reason") != reason or prior.get("message") != message:
            self._event(EVENT_WARNING, reason, message)

    def _say_why_not_ready(self, ready: int, total: int) -> None:
        """Running=False with the first pod's own reason (ImagePullBackOff, FailedMount,
        Unschedulable, ...) when one says; an event when that reason changes, not on every pass."""
        message = f"{ready}/{total} pods ready"
        waiting = why_not_running(self.gang, self.o.pod_events)
        if waiting is None:
            self._condition(CONDITION_RUNNING, False, REASON_PODS_NOT_READY, message)
            return
        message += f": {waiting.message}"
        if self._prior_condition(CONDITION_RUNNING).get("reason") != waiting.reason:
            self._event(EVENT_WARNING, waiting.reason, message)
        self._condition(CONDITION_RUNNING, False, waiting.reason, message)

    def _waiting_after_preemption(self) -> str | None:
        """Stopped by the admission earlier (preempted, evicted, deactivated, its admission
        withdrawn) and not admitted again yet: the job stays Suspended. The reason it was
        stopped for, or None."""
        if self.o.admission.admitted:
            return None
        for c in self.prior.get("conditions") or []:
            if (
                c.get("type") == CONDITION_SUSPENDED
                and c.get("reason") in STOPPED_BY_ADMISSION
                and c.get("status") == "True"
            ):
                return str(c["reason"])
        return None

    def _pods_ready_deadline(self) -> datetime | None:
        """When the current gang must be all ready (under either admission: an external
        queue manager's job can be just as stuck on an unpullable image).

        Counted from its latest pod's creation: a gang is not created before its last pod
        is. An operator killed halfway through a gang (or a leader replaced) creates the
        rest when it is back, and the clock starts then, instead of releasing a gang that
        never had all its pods. A member whose create keeps being refused adds no pod, so
        such a gang still times out."""
        timeout = self.settings.pods_ready_timeout_seconds
        if timeout <= 0 or not self.gang:
            return None
        created = [parse_time(p["metadata"].get("creationTimestamp")) for p in self.gang]
        known = [c for c in created if c is not None]
        return max(known) + timedelta(seconds=timeout) if known else None

    def _checkpoint_storage(self) -> StorageVerdict:
        """The CheckpointStorage condition; an event only when its reason changes."""
        assert self.spec is not None
        verdict = judge_checkpoint_storage(
            self.spec,
            self._gang_size(),
            str(self.meta.get("namespace") or ""),
            self.o.checkpoint_claim,
            dispatched_from=origin(self.o.job),
        )
        self._condition(CONDITION_CHECKPOINT_STORAGE, verdict.ok, verdict.reason, verdict.message)
        prior = self._prior_condition(CONDITION_CHECKPOINT_STORAGE)
        if prior.get("reason") != verdict.reason and not verdict.invalid:
            self._event(verdict.event_type, verdict.reason, verdict.message)
        return verdict

    def _create_missing_support_objects(self) -> None:
        if all(k in self.o.children for k in support_keys(self.job, self.settings)):
            return
        for manifest in build_support_objects(self.job, self.settings):
            if child_key(manifest) not in self.o.children:
                self.create.append(manifest)

    def gang_manifests(self) -> list[Manifest]:
        """The pods of the current gang generation as built, once per pass and generation:
        building them is most of a pass's time, and a pass at rest asks twice."""
        if self.restarts not in self._built:
            self._built[self.restarts] = build_pods(self.job, self.restarts, self.settings)
        return self._built[self.restarts]

    def gang_members(self) -> list[str]:
        """The names of the current gang's pods, in rank order: gang_manifests' names,
        from the rank layout alone (a pass that creates nothing builds no pod)."""
        return [pod_name(self.job.name, s.role, s.index) for s in self.job.layout.slots]

    def _missing_pods(self) -> list[Manifest]:
        existing = {name_of(p) for p in self.o.pods}
        if existing.issuperset(self.gang_members()):
            return []
        missing = [m for m in self.gang_manifests() if m["metadata"]["name"] not in existing]
        placed = self.o.admission.placements
        avoided = sorted({*node_blame.names(self.avoided), *self.o.suspect_nodes})
        return [keep_off(place(m, placed[m["metadata"]["name"]])
                         if m["metadata"]["name"] in placed else m, avoided)
                for m in missing]  # fmt: skip

    def _lost_with_node(self) -> set[str]:
        """Pods whose node is NotReady, Unknown, gone or out of service (a vanished member
        by the node it was on)."""
        pods = [*self.o.pods, *self._gone_members()]
        return {name_of(p) for p in pods if node_of(p) in self.o.lost_nodes}

    def _gone_members(self) -> list[Pod]:
        """The last states of this generation's vanished members (Observed.gone_pods; the
        reconcile picked them by the same rule, which holds here for any caller)."""
        return vanished_members(self.o.gone_pods, self.o.pods, self.restarts)

    def _force_deletes(self) -> list[str]:
        """Pods stuck terminating on a lost node, due now (policies/nodes.py); a look again
        when the next one falls due."""
        margin = timedelta(seconds=self.settings.force_delete_margin_seconds)
        due, next_due = force_deletes(self.o.pods, self.o.lost_nodes, self.now, margin)
        if next_due is not None:
            self.requeue.append(seconds_until(next_due, self.now))
        return due

    def _gang_size(self) -> int:
        assert self.spec is not None
        return self.job.layout.nnodes  # made once per job (builders.Job.layout)

    def _run_policy(self) -> RunPolicy:
        if self.spec is not None:
            return self.spec.runPolicy
        return lenient_run_policy(self.o.job.get("spec"))

    def _stop_conditions(self, reason: str, message: str) -> None:
        self._condition(CONDITION_RUNNING, False, reason, message)
        if self._had_condition(CONDITION_RESTARTING):
            self._condition(CONDITION_RESTARTING, False, reason, message)

    def _prior_condition(self, type_: str) -> Mapping[str, Any]:
        for c in self.prior.get("conditions") or []:
            if c.get("type") == type_:
                return c  # type: ignore[no-any-return]
        return {}

    def _had_condition(self, type_: str) -> bool:
        return any(c.get("type") == type_ for c in self.prior.get("conditions") or [])

    def _condition(self, type_: str, status: bool, reason: str, message: str) -> None:
        self.conditions.append(ConditionUpdate(type_, status, reason, message))

    def _event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def _requeue_while_active(self) -> None:
        # Progress is copied on every pass; the ConfigMap watch wakes us too, this is the floor.
        self.requeue.append(self.settings.progress_sync_seconds)
        self._requeue_for_deadline()

    def _requeue_for_deadline(self) -> None:
        assert self.spec is not None
        deadline = deadline_of(self.start_time, self.spec.runPolicy)
        if deadline is not None:
            self.requeue.append(seconds_until(deadline, self.now))

    def _requeue_for_ttl(self, policy: RunPolicy) -> None:
        # Never delete in the pass that finishes the job: watchers see the final status first.
        if policy.ttlSecondsAfterFinished is not None:
            self.requeue.append(float(policy.ttlSecondsAfterFinished))

    def _render(self) -> Plan:
        force = self._force_deletes()
        error = self.o.create_error
        if error is not None and not error.permanent and self.phase == JobPhase.STARTING:
            self._say_create_retry(error)
        status = compute_status(
            self.prior,
            self.spec,
            StatusDecision(
                phase=self.phase,
                conditions=self.conditions,
                restarts=self.restarts,
                counted_restarts=self.counted_restarts,
                start_time=self.start_time,
                completion_time=self.completion_time,
                last_restart_time=self.last_restart_time,
                gang=self.gang,
            ),
            now=self.now,
            observed_generation=self.meta.get("generation"),
            progress=self.o.progress,
        )
        if self.queue_position is not None:
            status["queuePosition"] = self.queue_position
        if self.admission:
            status["admission"] = self.admission
        if self.elastic:
            status["elastic"] = self.elastic
        if self.progress_watch:
            status["progressWatch"] = self.progress_watch
        if self.avoided:
            status["avoidedNodes"] = [a.to_status() for a in self.avoided]
        if self.last_failure:
            status["lastFailure"] = self.last_failure
        ledger, added = advance(
            Ledger.from_status(self.prior.get("goodput")),
            self.phase,
            gpus_of(self.spec) if self.spec is not None else 0,
            self.now,
            self.restart_loss,
        )
        if ledger.seconds or ledger.since:
            status["goodput"] = ledger.to_status()
        return Plan(
            status=status,
            create=self.create,
            delete_pods=sorted(self.delete),
            delete_grace_seconds=self.delete_grace if self.delete else None,
            force_delete_pods=force,
            events=self.events,
            gpu_seconds=added,
            requeue_after=min(self.requeue) if self.requeue else None,
        )


def _phase(value: object) -> JobPhase:
    try:
        return JobPhase(str(value)) if value else JobPhase.PENDING
    except ValueError:
        return JobPhase.PENDING
