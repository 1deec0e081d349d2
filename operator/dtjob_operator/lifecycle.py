"""The lifecycle planner: from what exists to what should happen next. Pure.

`plan(observed, settings)` reads one job, its pods and its other children, and returns a
Plan: children to create, pods to delete, whether to delete the job, the full desired
status, events for transitions, and when to look again. The executor applies it; running
the planner again on the result yields nothing new, so an operator restart at any moment
loses nothing and creates nothing twice.

Reading order (each step returns when it decides):

1. The job is being deleted: nothing to do (owner references let Kubernetes collect the
   children).
2. Already Succeeded or Failed: the status is final (only the trainer's last progress is
   still copied); apply cleanPodPolicy; delete the job once ttlSecondsAfterFinished passed.
3. Invalid spec: Failed with reason InvalidSpec and every error's field in the message; no
   children are created. Likewise when the API server refused to create a child for good
   (422 Invalid, Pod Security, a missing PriorityClass; `observed.create_error`, policies/
   create_errors.py): its message names the field, and every pod of the gang is deleted.
   A transient refusal (quota, throttling, 5xx) keeps the phase and sets Running=False
   with reason CreateFailed; the executor retries with backoff.
3b. Checkpoint storage (policies/checkpoint_storage.py): the CheckpointStorage condition,
   with an event when its reason changes; a ReadWriteOncePod claim for a multi-pod gang is
   InvalidSpec, and a missing claim holds the gang's creation (step 9) until it exists.
4. spec.suspend: delete every pod, phase Suspended; the deadline clock stops (startTime is
   cleared, as batch/v1 Jobs do); unsuspending resumes with a fresh gang. Under the built-in
   admission a suspended job gives up its admission and queues again when resumed.
4a. The admission can never be applied (a Kueue admission check conflicts with the pods):
   Failed with the backend's reason.
4b. Stopped by the admission (preempted for a higher-priority job, evicted or deactivated
   by Kueue, its admission withdrawn): delete every pod (SIGTERM: the trainer
   checkpoints), phase Suspended with the backend's reason (Preempted, Deactivated,
   AdmissionWithdrawn), Admitted False; one episode is one Event and, for a preemption,
   one count in status.admission.preemptions, however many passes the pods take to go;
   startTime is cleared (as for a suspended batch/v1 Job: time queued again does not
   count toward activeDeadlineSeconds). The job waits and resumes from its checkpoint
   once admitted again.
5. activeDeadlineSeconds passed since startTime: Failed/DeadlineExceeded, pods deleted.
6. A failure in the current gang (pods labelled generation == status.restarts): permanent
   -> Failed at once; retryable -> restarts+1 (Failed/BackoffLimitExceeded past
   backoffLimit), phase Restarting, every pod deleted. Once the gang has started, a member
   that is deleted or vanishes counts as a retryable failure too (eviction, node drain).
   A restart that points at a node keeps the next gangs off it (plan_nodes.py).
7. Success per the success policy: Succeeded; still-running pods (parameter servers) stop.
8. Gang started (Starting/Running): recreate anything missing, Running once all pods are
   ready. A gang not all ready within the pods-ready timeout of its first pod's creation is
   released (pods deleted) and the job re-queued (phase Queued, Admitted False/
   PodsReadyTimeout, status.admission.requeues + 1; under an external admission phase
   Pending and the gang is re-created), at most runPolicy.admissionRetryLimit times; then
   Failed with the pods' own reason (ImagePullBackOff, FailedMount, ...).
8a. While Running, status.progressWatch follows the reported step (plan_stall.py,
   policies/stall.py): a step that stood still past its progress deadline restarts the
   gang like a retryable failure of step 6, reason Stalled (counted, with backoff), and
   the pass looks again when that deadline would pass.
9. Otherwise start the gang (Pending, Queued, Restarting, resumed): wait for admission
   (phase Queued with the admission's message and status.queuePosition), for the restart
   backoff, for every pod of an older gang to be gone (the new pods reuse their names)
   and, for a gang restarted after a failure, for an admission pass to find that it still
   fits (it may have lost its node), then create the whole gang at once -> Starting.

A job is never stuck: every waiting branch returns a requeue_after.
"""

from __future__ import annotations

from dtjob_api.spec import RunPolicy
from dtjob_api.status import TERMINAL_PHASES, JobPhase
from dtjob_operator.builders import Job
from dtjob_operator.builders.job import elastic_size
from dtjob_operator.constants import (
    CONDITION_ADMITTED,
    CONDITION_RESTARTING,
    CONDITION_RUNNING,
    CONDITION_SUSPENDED,
    EVENT_CREATED,
    EVENT_NORMAL,
    EVENT_WARNING,
    REASON_ADMITTED,
    REASON_BACKOFF_LIMIT_EXCEEDED,
    REASON_CHILD_CONFLICT,
    REASON_CREATE_FAILED,
    REASON_DEADLINE_EXCEEDED,
    REASON_INVALID_SPEC,
    REASON_POD_FAILED_PERMANENT,
    REASON_PODS_NOT_READY,
    REASON_PODS_READY,
    REASON_PODS_READY_TIMEOUT,
    REASON_PREEMPTED,
    REASON_RESUMED,
    REASON_STALLED,
    REASON_SUSPENDED,
    REASON_WAITING_FOR_ADMISSION,
    STATUS_TRUE,
)
from dtjob_operator.plan_elastic import ElasticSteps
from dtjob_operator.plan_ends import EndSteps
from dtjob_operator.plan_nodes import NodeSteps
from dtjob_operator.plan_stall import StallSteps
from dtjob_operator.plan_types import Event, Observed, Plan
from dtjob_operator.policies.backoff import restart_delay, restart_not_before
from dtjob_operator.policies.deadline import deadline_exceeded
from dtjob_operator.policies.failure_policy import gang_failures, is_invalid_config
from dtjob_operator.policies.node_blame import Suspect
from dtjob_operator.policies.peer_lost import peer_lost_wait
from dtjob_operator.policies.pod_failure_policy import GangVerdict, judge_gang
from dtjob_operator.policies.pods import (
    gang_of,
    is_ready,
    live_names,
    name_of,
    stale_pods,
)
from dtjob_operator.policies.stall import STALL_GRACE_SECONDS, Stall
from dtjob_operator.policies.success_policy import judge_success
from dtjob_operator.policies.times import format_time, seconds_until
from dtjob_operator.policies.waiting import why_not_running
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.validated import spec_errors

__all__ = ["Event", "Observed", "Plan", "plan"]

STARTED_PHASES = frozenset({JobPhase.STARTING, JobPhase.RUNNING})
MAX_ERRORS_IN_MESSAGE = 5
# Running=False reasons under which a missing member was never created (not lost).
CREATE_WAITS = frozenset({REASON_CREATE_FAILED, REASON_CHILD_CONFLICT})


# With admission "external" nobody here places the gang: a job that asks to be packed must
# not start spread out as if it had not. It fails, saying where it would be honoured.
TOPOLOGY_NEEDS_KUEUE = (
    "spec.placement.topology: this operator's admission is external, so it does not place "
    "gangs by topology; use admission builtin, or label the job "
    "kueue.x-k8s.io/queue-name=<a LocalQueue whose ClusterQueue has a topology flavor> "
    "(docs/kueue.md), or remove spec.placement"
)


def plan(observed: Observed, settings: OperatorSettings) -> Plan:
    """The next step for one job (see the module docstring for the order of decisions)."""
    return _Planner(observed, settings).run()


class _Planner(ElasticSteps, StallSteps, NodeSteps, EndSteps):
    """One planning pass: the decisions, top to bottom, over PlanState's toolkit."""

    # -- the decision, top to bottom -----------------------------------------------------

    def run(self) -> Plan:
        if self.meta.get("deletionTimestamp"):
            return Plan(status=dict(self.prior))
        if self.prior_phase in TERMINAL_PHASES:
            return self._finished()
        errors = spec_errors(
            self.o.job.get("spec"),
            self.meta.get("name"),
            # The admin's guard rails hold a job until it starts: tightening one must not
            # fail the jobs already running (a suspend clears startTime: a resumed job is
            # checked anew).
            rails=None if self.prior.get("startTime") else self.settings.guard_rails(),
        )
        if errors:
            shown = "; ".join(str(e) for e in errors[:MAX_ERRORS_IN_MESSAGE])
            more = len(errors) - MAX_ERRORS_IN_MESSAGE
            return self._fail(
                REASON_INVALID_SPEC, shown + (f" (and {more} more)" if more > 0 else "")
            )
        # The size the status records once written; the pass's until then.
        size = None if elastic_size(self.o.job) else self.o.admission.elastic_size
        job = Job.from_object(self.o.job, size=size)
        self.job, self.spec = job, job.spec
        self.gang = gang_of(self.o.pods, self.restarts)
        if self.spec.placement and self.spec.placement.topology and not self.o.admission.places:
            return self._fail(REASON_INVALID_SPEC, TOPOLOGY_NEEDS_KUEUE)
        self.storage = self._checkpoint_storage()
        if self.storage.invalid:
            return self._fail(REASON_INVALID_SPEC, self.storage.message)
        refused = self.o.create_error
        if refused is not None and refused.permanent:
            return self._refused(refused)
        if self.spec.suspend:
            return self._suspend()
        if self.o.admission.fail is not None:
            return self._fail(*self.o.admission.fail)
        if self.o.admission.stop is not None:
            return self._stop_for_admission(self.o.admission.stop, self.o.admission.stop_reason)
        if self.o.admission.resize is not None and self._resizable(self.o.admission.resize[0]):
            return self._resize(*self.o.admission.resize)
        if self.prior_phase == JobPhase.SUSPENDED and not self._waiting_after_preemption():
            self._condition(CONDITION_SUSPENDED, False, REASON_RESUMED, "the job was resumed")
            self._event(EVENT_NORMAL, REASON_RESUMED, "the job was resumed")
        run_policy = self.spec.runPolicy
        if deadline_exceeded(self.start_time, run_policy, self.now):
            seconds = run_policy.activeDeadlineSeconds
            return self._fail(
                REASON_DEADLINE_EXCEEDED,
                f"the job ran longer than activeDeadlineSeconds ({seconds}s)",
            )
        members = self.gang_members()
        if self._prior_condition(CONDITION_RUNNING).get("reason") in CREATE_WAITS:
            # A member whose create was refused was never there to be lost: it is created
            # below, not mourned with a gang restart.
            present = {name_of(p) for p in self.o.pods}
            members = [m for m in members if m in present]
        started = self.prior_phase in STARTED_PHASES
        verdict = judge_gang(
            gang_failures(self.o.pods, self.restarts, members, started),
            [*self._gone_members(), *self.o.pods],  # a vanished member by its last state
            run_policy,
            self._lost_with_node(),
        )
        if verdict is not None:
            wait = peer_lost_wait(verdict.verdict.failure, self.gang, self.now)
            if wait is None:
                return self._on_failure(verdict, run_policy)
            self.requeue.append(wait)  # a lost peer alone: its cause is still on its way out
        success = judge_success(self.spec, self.gang)
        if success is not None:
            return self._succeed(success)
        if self.o.admission.admitted:  # a queued job holds nothing, not even its Service
            self._create_missing_support_objects()
        if self.prior_phase in STARTED_PHASES:
            return self._keep_running()
        return self._start_gang(run_policy)

    def _suspend(self) -> Plan:
        self.delete.update(live_names(self.o.pods))
        self.phase = JobPhase.SUSPENDED
        self.start_time = None  # the deadline clock restarts on resume
        message = "spec.suspend is true: the pods are deleted until it is false again"
        self._condition(CONDITION_SUSPENDED, True, REASON_SUSPENDED, message)
        self._condition(CONDITION_RUNNING, False, REASON_SUSPENDED, message)
        if self.prior_phase != JobPhase.SUSPENDED:
            self._event(EVENT_NORMAL, REASON_SUSPENDED, message)
        if self.o.admission.queues and self._had_condition(CONDITION_ADMITTED):
            self._condition(CONDITION_ADMITTED, False, REASON_SUSPENDED, message)
        self.gang = []
        return self._render()

    def _stop_for_admission(self, message: str, reason: str) -> Plan:
        """The admission stops this job's gang (see the docstring, 4b): preempted for a
        higher-priority job, evicted or deactivated by Kueue, its admission withdrawn.
        The admission says so on every pass until the pods are gone; the episode is one
        preemption and one Event. As for a batch/v1 Job suspended, the deadline clock
        restarts on resume: time spent queued again does not count."""
        self.delete.update(live_names(self.o.pods))
        again = self.prior_phase == JobPhase.SUSPENDED and (
            self._prior_condition(CONDITION_SUSPENDED).get("reason") == reason
        )
        self.phase = JobPhase.SUSPENDED
        self.start_time = None
        self._condition(CONDITION_SUSPENDED, True, reason, message)
        self._condition(CONDITION_RUNNING, False, reason, message)
        self._condition(CONDITION_ADMITTED, False, reason, message)
        if not again:
            self._event(EVENT_WARNING, reason, message)
            if reason == REASON_PREEMPTED:
                self.admission["preemptions"] = int(self.admission.get("preemptions") or 0) + 1
        self.gang = []
        self.requeue.append(self.settings.resync_seconds)
        return self._render()

    def _release_unready(self, ready: int, total: int) -> Plan:
        """Pods-ready timeout: give the GPUs back and queue again (with backoff), at most
        runPolicy.admissionRetryLimit times; then the job fails with the pods' reason."""
        timeout = self.settings.pods_ready_timeout_seconds
        requeues = int(self.admission.get("requeues") or 0) + 1
        waiting = why_not_running(self.gang, self.o.pod_events)
        why = f": {waiting.message}" if waiting else ""
        limit = self._run_policy().admissionRetryLimit
        if requeues > limit:
            return self._fail(
                waiting.reason if waiting else REASON_PODS_READY_TIMEOUT,
                f"only {ready}/{total} pods were ready {timeout:.0f}s after the gang was "
                f"created, after {limit} re-queues (runPolicy.admissionRetryLimit){why}",
            )
        self.admission.update(requeues=requeues, lastRequeueTime=format_time(self.now))
        # Under an external queue manager there is no queue of ours to go back to: the gang
        # is re-created once its pods are gone (phase Pending), within the same limit.
        then = "re-queued" if self.o.admission.queues else "its gang re-created"
        message = (
            f"only {ready}/{total} pods were ready {timeout:.0f}s after the gang was created: "
            f"its pods are released and the job is {then} (re-queue {requeues} of at most "
            f"{limit}){why}"
        )
        self.delete.update(live_names(self.o.pods))
        self.phase = JobPhase.QUEUED if self.o.admission.queues else JobPhase.PENDING
        self._condition(CONDITION_ADMITTED, False, REASON_PODS_READY_TIMEOUT, message)
        self._condition(CONDITION_RUNNING, False, REASON_PODS_READY_TIMEOUT, message)
        self._event(EVENT_WARNING, REASON_PODS_READY_TIMEOUT, message)
        self.gang = []
        self.requeue.append(self.settings.resync_seconds)
        return self._render()

    def _on_failure(self, gang: GangVerdict, policy: RunPolicy) -> Plan:
        verdict = gang.verdict
        if not verdict.retryable:
            bundled = self.spec is not None and self.spec.trainer.command is None
            invalid = is_invalid_config(verdict.failure, bundled)
            return self._fail(
                REASON_INVALID_SPEC if invalid else REASON_POD_FAILED_PERMANENT, verdict.message
            )
        suspect = self._suspect_of_failure(verdict.failure, gang.counted)
        return self._restart_gang(
            verdict.reason, verdict.message, gang.counted, policy, suspect=suspect
        )

    def _on_stall(self, stall: Stall, policy: RunPolicy) -> Plan:
        """The step stood still past its deadline: the gang restarts from its last
        checkpoint like a retryable failure, counted against backoffLimit."""
        said, resume = self._stall_detail(stall)
        suspect = self._suspect_of_stall()
        self.progress_watch = None  # the next gang is watched anew
        # Its ranks are stuck: SIGTERM cannot make them checkpoint (the trainer saves at its
        # next step), and the stacks are kept already. A short grace, not the pods' own.
        self.delete_grace = STALL_GRACE_SECONDS
        return self._restart_gang(
            REASON_STALLED, said, True, policy, resume=resume, suspect=suspect,
            stalled=stall.still_seconds,
        )  # fmt: skip

    def _restart_gang(
        self,
        reason: str,
        why: str,
        counted: bool,
        policy: RunPolicy,
        *,
        resume: str = "",
        suspect: Suspect | None = None,
        stalled: float = 0.0,
    ) -> Plan:
        """Every pod goes; the next generation starts after the backoff, off the node the
        failure points at (`suspect`). Past backoffLimit (when `counted`) the job fails
        instead. `resume` names the checkpoint's step."""
        if counted and self.counted_restarts >= policy.backoffLimit:
            return self._fail(
                REASON_BACKOFF_LIMIT_EXCEEDED,
                f"the gang failed again after {self.counted_restarts} restarts "
                f"(backoffLimit {policy.backoffLimit}): {why}",
            )
        self._avoid(suspect)
        self._note_restart_loss(stalled)
        self.restarts += 1
        if counted:
            self.counted_restarts += 1
        self.last_restart_time = self.now
        delay = restart_delay(self._failure_restarts(), policy)
        if counted:
            which = f"{self.counted_restarts} of at most {policy.backoffLimit}"
        else:
            which = (
                f"{self.restarts} (not charged to backoffLimit: {self.counted_restarts} of "
                f"{policy.backoffLimit} used)"
            )
        message = f"gang restart {which} in {delay}s, from the last checkpoint{resume}: {why}"
        self.phase = JobPhase.RESTARTING
        self._condition(CONDITION_RESTARTING, True, reason, message)
        self._condition(CONDITION_RUNNING, False, reason, message)
        self._event(EVENT_WARNING, reason, message)
        self.delete.update(live_names(self.o.pods))
        self.gang = []
        self.requeue.append(delay if delay > 0 else self.settings.resync_seconds)
        return self._render()

    def _keep_running(self) -> Plan:
        if self.prior_phase == JobPhase.RUNNING:
            # Pods finishing one by one do not undo Running; a step standing still does.
            self.phase = JobPhase.RUNNING
            if (stall := self._watch_progress()) is not None:
                return self._on_stall(stall, self._run_policy())
        self.create.extend(self._missing_pods())
        ready, total = sum(is_ready(p) for p in self.gang), self._gang_size()
        starting = self.phase != JobPhase.RUNNING
        if starting and ready == total:
            self.phase = JobPhase.RUNNING
            message = f"all {total} pods are ready"
            self._condition(CONDITION_RUNNING, True, REASON_PODS_READY, message)
            if self._had_condition(CONDITION_RESTARTING):
                self._condition(CONDITION_RESTARTING, False, REASON_PODS_READY, message)
            self._event(EVENT_NORMAL, REASON_PODS_READY, message)
            self._watch_progress()  # the stall clock starts when the gang runs, not before
        elif starting:
            deadline = self._pods_ready_deadline()
            if deadline is not None and self.now >= deadline:
                return self._release_unready(ready, total)
            if deadline is not None:
                self.requeue.append(seconds_until(deadline, self.now))
            self.phase = JobPhase.STARTING
            self._say_why_not_ready(ready, total)
        self._requeue_while_active()
        return self._render()

    def _start_gang(self, policy: RunPolicy) -> Plan:
        if not self.o.admission.admitted:
            preempted = self._waiting_after_preemption()
            self.phase = JobPhase.SUSPENDED if preempted else JobPhase.QUEUED
            message = self.o.admission.message or "waiting for the whole gang to fit"
            reason = self.o.admission.reason
            prior = self._prior_condition(CONDITION_ADMITTED)
            if preempted and self.o.admission.reason == REASON_WAITING_FOR_ADMISSION:
                reason = preempted  # keep saying why it stopped while it waits
            self._condition(CONDITION_ADMITTED, False, reason, message)
            if not preempted and (
                self.prior_phase != JobPhase.QUEUED or prior.get("reason") != reason
            ):
                # Admitted before and released now: a restarted gang that no longer fits.
                released = prior.get("status") == STATUS_TRUE
                self._event(EVENT_WARNING if released else EVENT_NORMAL, reason, message)
            self.queue_position = self.o.admission.queue_position
            self.admission.pop("domain", None)  # placed again once admitted again
            self.elastic.pop("replicas", None)  # sized again too
            self.requeue.append(self.settings.resync_seconds)
            return self._render()
        prior = self._prior_condition(CONDITION_ADMITTED)
        # A restarted operator knows no placement of a gang admitted before: keep saying it.
        kept = prior.get("message") if prior.get("status") == STATUS_TRUE else None
        message = self.o.admission.admitted_message or kept or "the whole gang may start"
        if self.o.admission.domain:
            self.admission["domain"] = self.o.admission.domain
        self._record_size()
        self._condition(CONDITION_ADMITTED, True, REASON_ADMITTED, message)
        # Kueue's word gets its Event here; the built-in admission's comes from the executor,
        # once per admission (reconcile._announce_admission), with this message.
        if (
            self.o.admission.announce_changes
            and self.o.admission.admitted_message
            and self._prior_condition(CONDITION_ADMITTED).get("message") != message
        ):
            self._event(EVENT_NORMAL, REASON_ADMITTED, message)
        not_before = restart_not_before(self.last_restart_time, self._failure_restarts(), policy)
        waiting = (
            seconds_until(not_before, self.now) if not_before and self.now < not_before else 0.0
        )
        if not waiting and stale_pods(self.o.pods, self.restarts):
            waiting = self.settings.resync_seconds  # old pods still hold the names
        if not waiting and self.o.admission.refit_pending and not self.gang:
            # A restarted gang is created only once an admission pass has checked it against
            # what is free now (it may no longer fit); the pass wakes this job.
            waiting = self.settings.resync_seconds
        if waiting:
            self.phase = (
                JobPhase.RESTARTING if self.prior_phase == JobPhase.RESTARTING else JobPhase.PENDING
            )
            self.requeue.append(waiting)
            self._requeue_for_deadline()
            return self._render()
        if self.storage is not None and self.storage.blocks_start:
            # Pods would hang in FailedMount: wait (the condition says why), look again.
            self.phase = (
                JobPhase.RESTARTING if self.prior_phase == JobPhase.RESTARTING else JobPhase.PENDING
            )
            self.requeue.append(self.settings.resync_seconds)
            return self._render()
        pods = self._missing_pods()
        self.create.extend(pods)
        self.phase = JobPhase.STARTING
        self.start_time = self.start_time or self.now
        total = self._gang_size()
        message = f"{sum(is_ready(p) for p in self.gang)}/{total} pods ready"
        self._condition(CONDITION_RUNNING, False, REASON_PODS_NOT_READY, message)
        if pods:
            self._event(
                EVENT_NORMAL,
                EVENT_CREATED,
                f"created {len(pods)} of {total} pods of gang generation {self.restarts}",
            )
        self._requeue_while_active()
        return self._render()
