"""The planner's steps for elastic jobs (issue 29; docs/design/elastic.md): a resize by
the admission is a gang restart that is no failure, and status.elastic records the size.
A mixin of the planner's toolkit, apart from the decision order in lifecycle.py."""

from __future__ import annotations

from dtjob_api.status import JobPhase
from dtjob_operator.constants import (
    CONDITION_RESTARTING,
    CONDITION_RUNNING,
    EVENT_NORMAL,
    REASON_RESIZED,
)
from dtjob_operator.plan_state import PlanState
from dtjob_operator.plan_types import Plan
from dtjob_operator.policies.pods import live_names
from dtjob_operator.policies.times import format_time


class ElasticSteps(PlanState):
    """Resizing a running elastic gang, and recording its size."""

    def _resizable(self, size: int) -> bool:
        """A running gang of another size than `size`, not being created or restarted."""
        worker = self.spec.roles.worker if self.spec else None
        return (
            worker is not None
            and size != worker.replicas
            and self.prior_phase == JobPhase.RUNNING
            and bool(self.gang)
        )

    def _failure_restarts(self) -> int:
        """Gang restarts the failure backoff counts: resizes are not failures, and five of
        them must not make the first real failure wait 2^5 backoffs."""
        return self.restarts - int(self.elastic.get("resizes") or 0)

    def _resize(self, size: int, why: str) -> Plan:
        """An elastic job resized by the admission: like a gang restart that is no failure.
        The pods get SIGTERM (a checkpoint), the next generation is created at `size` once
        they are gone and a pass has checked it still fits, and it resumes there. Neither
        restart count nor backoffLimit is charged beyond the generation."""
        worker = self.spec.roles.worker if self.spec else None
        was = worker.replicas if worker else 0
        message = f"{why}: the gang restarts with {size} workers (was {was}) from its checkpoint"
        self._note_restart_loss(resize=True)
        self.restarts += 1  # a new generation of pods; countedRestarts stays
        self.elastic.update(
            replicas=size,
            resizes=int(self.elastic.get("resizes") or 0) + 1,
            lastResizeTime=format_time(self.now),
            lastResizeReason=why,
        )
        self.phase = JobPhase.RESTARTING
        self._condition(CONDITION_RESTARTING, True, REASON_RESIZED, message)
        self._condition(CONDITION_RUNNING, False, REASON_RESIZED, message)
        self._event(EVENT_NORMAL, REASON_RESIZED, message)
        self.delete.update(live_names(self.o.pods))
        self.gang = []
        self.requeue.append(self.settings.resync_seconds)
        return self._render()

    def _record_size(self) -> None:
        """status.elastic of an elastic job: the worker pods of the gang it was admitted
        with (built from this size), and its bounds."""
        spec = self.spec
        if spec is None or spec.roles.worker is None:
            return
        declared = (self.job.declared or spec).roles.worker
        if declared is None or declared.minReplicas is None:
            return
        self.elastic.update(
            replicas=spec.roles.worker.replicas,
            minReplicas=declared.minReplicas,
            maxReplicas=declared.replicas,
        )
        self.elastic.setdefault("resizes", 0)
