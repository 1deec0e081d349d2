"""Stall detection: a Running gang whose reported step stands still past its progress
deadline has stopped training, whatever its pods' phases say. Pure.

The operator keeps a small watch in the job's status (status.progressWatch): the gang it
belongs to, the last step seen, when the stall clock started, when this gang's step last
moved, and the seconds per step learned from its moves. `watch()` advances it on every
pass, `stalled()` judges it, `next_check()` says when to look again: a stalled gang writes
nothing, so no watch event would wake the operator.

What does not count (docs/lifecycle.md, "Stalled gangs"):
- any phase but Running (Queued, Starting, Restarting, Suspended, a resize): the watch is
  dropped, and the next one starts when the gang runs;
- a new gang: the progress ConfigMap outlives a gang, so the step first seen is only a
  baseline; a change of step after it is this gang's progress;
- the trainer saying it is checkpointing or evaluating (progress.activity), or that its
  steps are done: the clock stops (`since` is cleared) and starts afresh after.
A trainer that never reports a step is never judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from dtjob_api.spec import RunPolicy, StallPolicy
from dtjob_api.status import PAUSED_ACTIVITIES, JobPhase
from dtjob_operator.policies.times import format_time, parse_time, seconds_until

# The learned deadline is MULTIPLE step times, at least FLOOR_SECONDS. Ten steps: a step
# that is now and then a few times slower (a data-loader hiccup, a straggling all-reduce)
# never trips it, and a 20-minute step still gets 200 minutes. The floor: with 2-second
# steps ten of them is 20 s, less than a checkpoint or evaluation pause the trainer does
# not announce (a custom image) or a slow write of the progress report itself.
MULTIPLE = 10
FLOOR_SECONDS = 600
# A stalled gang's pods are deleted with this grace period, not their own (60 s by
# default): its ranks are stuck and cannot checkpoint on SIGTERM; a few seconds let a rank
# that can still exit flush its log. bench/stall_detection.py: the restart took 96-147 s
# from the declaration to training again while the pods' 60 s ran out.
STALL_GRACE_SECONDS = 5
# Weight of the newest step-time sample: the operator sees a move when the report arrives,
# not when the step ended, so one sample is jittered by up to a report interval; a quarter
# smooths that and still follows a real change of pace within a few reports.
SMOOTHING = 0.25


@dataclass(frozen=True)
class Watch:
    """status.progressWatch, typed (dtjob_api.status.ProgressWatch documents each field)."""

    gang: int
    step: int | None
    since: datetime | None
    """When the stall clock started: the last move, the watch's start, or the end of a
    pause; None while it is stopped (a pause). Cleared rather than moved on every pass, so
    that a pass changes the status only when something happened."""
    last_move: datetime | None = None
    """When this gang's step last changed; None before it first did."""
    seconds_per_step: float | None = None

    @classmethod
    def from_status(cls, value: Mapping[str, Any] | None) -> Watch | None:
        """The watch a status holds; None when absent or unreadable (a hand-edited status
        starts a new watch rather than crashing the planner)."""
        gang = _int((value or {}).get("gang"))
        if not value or gang is None:
            return None
        sps = value.get("secondsPerStep")
        return cls(
            gang=gang,
            step=_int(value.get("step")),
            since=parse_time(value.get("since")),
            last_move=parse_time(value.get("lastMoveTime")),
            seconds_per_step=float(sps) if isinstance(sps, int | float) and sps > 0 else None,
        )

    def to_status(self, policy: RunPolicy) -> dict[str, Any]:
        """The status form, with the deadline in force (what `kubectl dtj why` shows)."""
        deadline = deadline_of(self, policy)
        value: dict[str, Any] = {
            "gang": self.gang,
            "step": self.step,
            "since": format_time(self.since) if self.since else None,
            "lastMoveTime": format_time(self.last_move) if self.last_move else None,
            "secondsPerStep": round(self.seconds_per_step, 3) if self.seconds_per_step else None,
            "deadlineSeconds": round(deadline.seconds) if deadline else None,
        }
        return {k: v for k, v in value.items() if v is not None}


@dataclass(frozen=True)
class Deadline:
    """How long the step may stand still, and where that figure comes from."""

    seconds: float
    learned_from: float | None = None
    """The seconds per step it was learned from; None: runPolicy.progressDeadlineSeconds."""

    def describe(self) -> str:
        """`deadline 600s, learned as 10 x 41.2s per step` and the like."""
        head = f"deadline {self.seconds:.0f}s"
        if self.learned_from is None:
            return f"{head}, runPolicy.progressDeadlineSeconds"
        learned = f"{MULTIPLE} x {self.learned_from:.1f}s per step"
        if MULTIPLE * self.learned_from < FLOOR_SECONDS:
            return f"{head}, the least learned deadline ({learned} is shorter)"
        return f"{head}, learned as {learned}"


@dataclass(frozen=True)
class Stall:
    """A gang whose step has stood still past its deadline."""

    step: int
    still_seconds: float
    deadline: Deadline

    def describe(self) -> str:
        """The sentence for the status, the Event and `kubectl dtj why`."""
        return (
            f"training stalled: step {self.step} has not moved for {self.still_seconds:.0f}s "
            f"({self.deadline.describe()})"
        )


def watch(
    prior: Watch | None,
    progress: Mapping[str, Any] | None,
    gang: int,
    phase: JobPhase,
    now: datetime,
) -> Watch | None:
    """The watch after this pass: None unless Running; a new one for a new gang; else the
    prior one moved on by the progress the trainer reported (`progress`: progress.json)."""
    if phase != JobPhase.RUNNING:
        return None
    now = now.replace(microsecond=0)  # the status keeps whole seconds; so does the clock
    step = _int((progress or {}).get("step"))
    paused = _paused(progress, step)
    if prior is None or prior.gang != gang:
        return Watch(gang=gang, step=step, since=None if paused else now)
    if step is None or step == prior.step:
        if paused:
            return replace(prior, since=None)
        # No report, or the same step: the clock runs on, or starts after a pause.
        return prior if prior.since else replace(prior, since=now)
    if paused:
        return replace(prior, step=step, last_move=now, since=None)
    return replace(
        prior, step=step, last_move=now, since=now, seconds_per_step=_learn(prior, step, now)
    )


def deadline_of(watch: Watch | None, policy: RunPolicy) -> Deadline | None:
    """The deadline in force; None while the gang is not judged: stallPolicy Off, nothing
    of this gang's own progress seen yet, or no deadline set and nothing learned."""
    if watch is None or policy.stallPolicy == StallPolicy.OFF or watch.last_move is None:
        return None
    if policy.progressDeadlineSeconds is not None:
        return Deadline(float(policy.progressDeadlineSeconds))
    if watch.seconds_per_step is None:
        return None
    return Deadline(max(FLOOR_SECONDS, MULTIPLE * watch.seconds_per_step), watch.seconds_per_step)


def stalled(watch: Watch | None, policy: RunPolicy, now: datetime) -> Stall | None:
    """The stall, once the step has stood still for the whole deadline; else None."""
    deadline = deadline_of(watch, policy)
    if watch is None or deadline is None or watch.step is None or watch.since is None:
        return None
    still = (now - watch.since).total_seconds()
    return Stall(watch.step, still, deadline) if still >= deadline.seconds else None


def next_check(watch: Watch | None, policy: RunPolicy, now: datetime) -> float | None:
    """Seconds until the deadline passes if the step stays still; None when nothing is
    judged (a move arrives as a ConfigMap event and wakes the operator anyway)."""
    deadline = deadline_of(watch, policy)
    if watch is None or deadline is None or watch.since is None:
        return None
    return seconds_until(watch.since + timedelta(seconds=deadline.seconds), now)


def _learn(prior: Watch, step: int, now: datetime) -> float | None:
    """The smoothed step time after a move to `step`. A sample needs two moves of this gang
    with the clock running in between (`since` still at the last move: no pause since),
    and a step that went forward."""
    if (
        prior.last_move is None
        or prior.since != prior.last_move
        or prior.step is None
        or step <= prior.step
    ):
        return prior.seconds_per_step
    sample = (now - prior.last_move).total_seconds() / (step - prior.step)
    if prior.seconds_per_step is None:
        return sample
    return prior.seconds_per_step + SMOOTHING * (sample - prior.seconds_per_step)


def _paused(progress: Mapping[str, Any] | None, step: int | None) -> bool:
    """The trainer says a still step is expected: it is checkpointing or evaluating, or its
    steps are done (the pods are on their way out)."""
    reported = progress or {}
    total = _int(reported.get("totalSteps"))
    done = step is not None and total is not None and step >= total
    activity = reported.get("activity")
    return done or (isinstance(activity, str) and activity in PAUSED_ACTIVITIES)


def _int(value: object) -> int | None:
    # bool is an int to Python, and never a step.
    return value if isinstance(value, int) and not isinstance(value, bool) else None
