"""The planner's step for sick nodes (issue 36; policies/node_blame.py): when a gang restart
points at a node (a hardware fault in its last words, the first-stopped rank of a stall,
a second failure in a row from one node),
the job's next gangs keep off it for the operator's avoidNodeSeconds, and an Event says so.
A mixin of the planner's toolkit; lifecycle.py calls it before a restart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dtjob_operator.constants import EVENT_WARNING, REASON_NODE_AVOIDED
from dtjob_operator.plan_state import PlanState
from dtjob_operator.policies import node_blame
from dtjob_operator.policies.failure_policy import PodFailure
from dtjob_operator.policies.times import format_time


class NodeSteps(PlanState):
    """Avoiding the node a restart points at."""

    def _suspect_of_failure(self, failure: PodFailure, counted: bool) -> node_blame.Suspect | None:
        """A hardware fault in the failed container's last words, else the same node as
        the last counted restart's decisive failure (node_blame.from_repeat); a counted
        failure's site is kept for the next (status.lastFailure). A disruption (an
        eviction, a preemption, a drain: not counted) says nothing about the node."""
        pods: Sequence[Any] = [*self.o.pods, *self._gone_members()]
        suspect = node_blame.from_failure(failure, pods)
        if not counted:
            return suspect
        window = self.settings.avoid_node_seconds
        suspect = suspect or node_blame.from_repeat(
            failure, pods, self.last_failure, self.now, window
        )
        self.last_failure = node_blame.failure_site(failure, pods, self.now)
        return suspect

    def _suspect_of_stall(self) -> node_blame.Suspect | None:
        return node_blame.from_stall(self.o.progress, self.gang or self.o.pods)

    def _avoid(self, suspect: node_blame.Suspect | None) -> None:
        seconds = self.settings.avoid_node_seconds
        if suspect is None or seconds <= 0:
            return
        self.avoided = node_blame.avoid(self.avoided, suspect, self.now, seconds)
        until = format_time(self.avoided[-1].until)
        self._event(
            EVENT_WARNING,
            REASON_NODE_AVOIDED,
            f"the job's next gangs keep off node {suspect.node} until {until}: {suspect.why}",
        )
