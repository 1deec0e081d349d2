"""The planner's steps for stall detection (issue 36; policies/stall.py): keep the watch
over a Running gang's step in status.progressWatch, and say what a stall is in a sentence.
A mixin of the planner's toolkit, apart from the decision order in lifecycle.py, which
restarts a stalled gang like a retryable failure."""

from __future__ import annotations

from typing import Any

from dtjob_operator.constants import EVENT_WARNING, REASON_STRAGGLER
from dtjob_operator.plan_state import PlanState
from dtjob_operator.policies.pods import name_of
from dtjob_operator.policies.stall import Stall, Watch, next_check, stalled, watch
from dtjob_operator.policies.stall_blame import blame, pod_of_rank, slowest_straggler
from dtjob_operator.status import progress_of


class StallSteps(PlanState):
    """Watching a Running gang's step; the decision to restart it is lifecycle's."""

    def _watch_progress(self) -> Stall | None:
        """Advance status.progressWatch by this pass's progress; the stall when the step
        has stood still past its deadline. Asks for a look again when the deadline would
        pass: a stalled gang writes nothing, so nothing else would wake the operator."""
        # The trainer's own document: status.progress has no `activity`. The ConfigMap may
        # be unreadable for a pass: then the status's copy of the last report.
        progress = self.o.progress or self.prior.get("progress")
        prior = Watch.from_status(self.prior.get("progressWatch"))
        current = watch(prior, progress, self.restarts, self.phase, self.now)
        policy = self._run_policy()
        self.progress_watch = current.to_status(policy) if current is not None else None
        if self.progress_watch is not None:
            self._watch_straggler(self.progress_watch)
        stall = stalled(current, policy, self.now)
        if stall is None and (wait := next_check(current, policy, self.now)) is not None:
            self.requeue.append(wait)
        return stall

    def _stall_detail(self, stall: Stall) -> tuple[str, str]:
        """The stall in a sentence, with whom it points at when the executor found out
        (Observed.stall_evidence), and where the next gang resumes, e.g. " (step 1100)"."""
        said = stall.describe()
        # The executor's evidence when it has some, else the trainer's heartbeat summary.
        if evidence := self.o.stall_evidence or blame(self.o.progress, self.gang):
            said += f"; {evidence}"
        progress = progress_of(self.o.progress) or self.prior.get("progress") or {}
        checkpoint = progress.get("lastCheckpointStep")
        return said, f" (step {checkpoint})" if checkpoint is not None else ""

    def _watch_straggler(self, watch: dict[str, Any]) -> None:
        """The slowest straggler of the heartbeat summary goes into the watch, and a new one
        (none before, or another rank) is said once in a Warning Event: shown, not acted
        on (docs/troubleshooting.md, "One rank is slower than the others")."""
        found = slowest_straggler(self.o.progress)
        prior = (self.prior.get("progressWatch") or {}).get("straggler")
        if found is None:
            return
        rank, slowdown = found
        watch["straggler"] = rank
        if rank == prior:
            return
        pod = pod_of_rank(rank, self.gang)
        where = ""
        if pod is not None:
            node = (pod.get("spec") or {}).get("nodeName")
            where = f" (pod {name_of(pod)}" + (f" on node {node})" if node else ")")
        self._event(
            EVENT_WARNING,
            REASON_STRAGGLER,
            f"rank {rank}{where} straggles: {slowdown:.1f}x the CPU time per step of the "
            "other ranks; shown, not acted on",
        )
