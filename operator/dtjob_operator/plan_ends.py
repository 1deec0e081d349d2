"""The planner's terminal steps: a job that fails (a refused spec, a gang out of restarts, a
deadline) or succeeds, and a finished job's passes until its TTL. A mixin of the planner's
toolkit, apart from the decision order in lifecycle.py, which picks when each applies."""

from __future__ import annotations

from dtjob_api.status import JobPhase
from dtjob_operator.constants import (
    CONDITION_ADMITTED,
    CONDITION_FAILED,
    CONDITION_SUCCEEDED,
    EVENT_NORMAL,
    EVENT_TTL_EXPIRED,
    EVENT_WARNING,
    REASON_DEADLINE_EXCEEDED,
    REASON_INVALID_SPEC,
)
from dtjob_operator.plan_state import PlanState
from dtjob_operator.plan_types import Event, Plan
from dtjob_operator.policies.clean_pod_policy import pods_to_clean
from dtjob_operator.policies.create_errors import CreateError
from dtjob_operator.policies.finished import finished_actions, lenient_run_policy, unfinished
from dtjob_operator.policies.pods import is_finished, live_names
from dtjob_operator.policies.success_policy import SuccessVerdict
from dtjob_operator.status import progress_of


class EndSteps(PlanState):
    """Failing, succeeding and being finished; which applies is lifecycle's decision."""

    def _refused(self, error: CreateError) -> Plan:
        """The API server refused a child for good: the spec cannot run. Every pod of the
        gang goes, including those this pass created (they are not in `observed` yet)."""
        if self._had_condition(CONDITION_ADMITTED):
            # The admission had let it start (the executor stored that first): say it ended.
            self._condition(CONDITION_ADMITTED, False, REASON_INVALID_SPEC, "the job failed")
        plan = self._fail(REASON_INVALID_SPEC, error.describe())
        members = self.gang_members()
        plan.delete_pods = sorted(set(plan.delete_pods) | set(members))
        return plan

    def _fail(self, reason: str, message: str) -> Plan:
        self.phase = JobPhase.FAILED
        self.completion_time = self.now
        self._condition(CONDITION_FAILED, True, reason, message)
        self._stop_conditions(reason, message)
        self._event(EVENT_WARNING, reason, message)
        policy = self._run_policy()
        self.delete.update(pods_to_clean(self.o.pods, policy.cleanPodPolicy))
        if reason in (REASON_DEADLINE_EXCEEDED, REASON_INVALID_SPEC):
            # Past the deadline, or with a spec that cannot work, nothing may keep running.
            self.delete.update(live_names(p for p in self.o.pods if not is_finished(p)))
        self._requeue_for_ttl(policy)
        return self._render()

    def _succeed(self, verdict: SuccessVerdict) -> Plan:
        self.phase = JobPhase.SUCCEEDED
        self.completion_time = self.now
        self._condition(CONDITION_SUCCEEDED, True, verdict.reason, verdict.message)
        self._stop_conditions(verdict.reason, verdict.message)
        self._event(EVENT_NORMAL, verdict.reason, verdict.message)
        policy = self._run_policy()
        self.delete.update(pods_to_clean(self.o.pods, policy.cleanPodPolicy))
        self.delete.update(unfinished(self.o.pods))  # parameter servers never exit alone
        self._requeue_for_ttl(policy)
        return self._render()

    def _finished(self) -> Plan:
        """Terminal: the status is final but for the trainer's last progress report."""
        policy = lenient_run_policy(self.o.job.get("spec"))
        succeeded = self.prior_phase == JobPhase.SUCCEEDED
        actions = finished_actions(self.o.pods, succeeded, policy, self.completion_time, self.now)
        status = dict(self.prior)
        if progress := progress_of(self.o.progress):
            status["progress"] = progress
        result = Plan(status, delete_pods=actions.delete_pods, requeue_after=actions.requeue_after)
        if actions.delete_job:
            result.delete_job = True
            ttl = policy.ttlSecondsAfterFinished
            message = f"deleting the job: ttlSecondsAfterFinished ({ttl}s) passed"
            result.events.append(Event(EVENT_NORMAL, EVENT_TTL_EXPIRED, message))
        return result
