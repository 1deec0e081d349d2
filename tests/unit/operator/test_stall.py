"""Stall detection (policies/stall.py): the watch over a Running gang's step, the deadline
learned from its step time or set by the user, and what never counts. Each scenario is a
series of passes (seconds, phase, progress) fed through watch() the way the planner does,
with the watch round-tripped through its status form as the status carries it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from unit.operator.builders import at

from dtjob_api.spec import RunPolicy
from dtjob_api.status import JobPhase
from dtjob_operator.policies.stall import (
    FLOOR_SECONDS,
    MULTIPLE,
    Deadline,
    Watch,
    deadline_of,
    next_check,
    stalled,
    watch,
)

R, Q, ST, RS, SU = (JobPhase.RUNNING, JobPhase.QUEUED, JobPhase.STARTING,
                    JobPhase.RESTARTING, JobPhase.SUSPENDED)  # fmt: skip

Pass = tuple[float, JobPhase, dict[str, Any] | None]


def p(step: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"step": step, **extra} if step is not None else dict(extra)


def passes(*items: Pass, gang: int = 0, policy: RunPolicy | None = None) -> Watch | None:
    """The watch after the planner's passes, each one round-tripped through the status."""
    current: Watch | None = None
    for seconds, phase, progress in items:
        current = watch(current, progress, gang, phase, at(seconds))
        if current is not None:
            current = Watch.from_status(current.to_status(policy or RunPolicy()))
    return current


def steady(first: float, every: float, count: int, step0: int = 0) -> list[Pass]:
    """`count` reports of a gang moving one step every `every` seconds from `first`."""
    return [(first + i * every, R, p(step0 + i)) for i in range(count)]


@dataclass
class Case:
    name: str
    passes: list[Pass]
    now: float
    policy: RunPolicy = field(default_factory=RunPolicy)
    deadline: float | None = None
    """The deadline in force; None: not judged."""
    stalled: bool = False
    next_check: float | None = None


EXPLICIT = RunPolicy(progressDeadlineSeconds=120)
OFF = RunPolicy(progressDeadlineSeconds=120, stallPolicy="Off")

CASES = [
    Case("2-second steps get the floor: 10 x 2 s is less than a checkpoint pause",
         steady(0, 2, 5), now=8 + 599, deadline=FLOOR_SECONDS, next_check=1),
    Case("2-second steps stall at the floor",
         steady(0, 2, 5), now=8 + 600, deadline=FLOOR_SECONDS, stalled=True, next_check=0),
    Case("20-minute steps get 10 of them, not the floor",
         steady(0, 1200, 4), now=3600 + 11_999, deadline=MULTIPLE * 1200, next_check=1),
    Case("20-minute steps stall after 10 still steps",
         steady(0, 1200, 4), now=3600 + 12_000, deadline=MULTIPLE * 1200, stalled=True,
         next_check=0),
    Case("one move learns nothing: the first move's interval began with the watch",
         [(0, R, p(100)), (50, R, p(101))], now=10_000),
    Case("a baseline and one move: an explicit deadline counts from the move",
         [(0, R, p(100)), (50, R, p(101))], policy=EXPLICIT, now=170, deadline=120,
         stalled=True, next_check=0),
    Case("explicit deadline, before it passes",
         [(0, R, p(100)), (50, R, p(101))], policy=EXPLICIT, now=150, deadline=120,
         next_check=20),
    Case("explicit deadline beats the learned one",
         steady(0, 1200, 4), policy=EXPLICIT, now=3600 + 120, deadline=120, stalled=True,
         next_check=0),
    Case("a step left over from the last gang is no progress: not judged even explicitly",
         [(0, R, p(1200)), (5000, R, p(1200))], policy=EXPLICIT, now=9000),
    Case("a trainer that reports no progress is never judged",
         [(0, R, None), (60, R, {}), (120, R, None)], policy=EXPLICIT, now=100_000),
    Case("progress appearing is this gang's first move (a fresh job has no leftover)",
         [(0, R, None), (30, R, p(1))], policy=EXPLICIT, now=150, deadline=120, stalled=True,
         next_check=0),
    Case("finished its steps: never stalled while the pods wind down",
         [*steady(0, 2, 4, step0=96), (8, R, p(100, totalSteps=100)),
          (1000, R, p(100, totalSteps=100))], now=100_000, deadline=FLOOR_SECONDS),
    Case("checkpointing stops the clock; it starts afresh when training resumes",
         [*steady(0, 2, 5), (300, R, p(4, activity="checkpointing")),
          (700, R, p(4, activity="checkpointing")), (710, R, p(4))],
         now=710 + 599, deadline=FLOOR_SECONDS, next_check=1),
    Case("evaluating counts as a pause too, and the clock runs again after it",
         [*steady(0, 2, 5), (700, R, p(4, activity="evaluating")), (710, R, p(4))],
         now=710 + 600, deadline=FLOOR_SECONDS, stalled=True, next_check=0),
    Case("stallPolicy Off: never judged",
         [(0, R, p(100)), (50, R, p(101))], policy=OFF, now=100_000),
    Case("not Running: no watch at all",
         [*steady(0, 2, 5), (10, SU, p(4))], policy=EXPLICIT, now=100_000),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_stall_decision(case: Case) -> None:
    w = passes(*case.passes, policy=case.policy)
    deadline = deadline_of(w, case.policy)
    assert (deadline.seconds if deadline else None) == case.deadline
    assert (stalled(w, case.policy, at(case.now)) is not None) == case.stalled
    assert next_check(w, case.policy, at(case.now)) == case.next_check


@pytest.mark.parametrize("phase", [Q, ST, RS, SU])
def test_time_in_any_other_phase_never_counts(phase: JobPhase) -> None:
    """A job that ran, then spent hours Queued/Starting/Restarting/Suspended: the watch is
    gone, and the gang that runs again starts from a baseline, with nothing learned."""
    before = steady(0, 2, 5)
    w = passes(*before, (100, phase, p(4)), (90_000, phase, p(4)), (90_010, R, p(4)))
    assert w is not None and w.since == at(90_010) and w.last_move is None
    assert w.seconds_per_step is None
    assert stalled(w, EXPLICIT, at(90_010 + 10_000)) is None


def test_a_new_gang_starts_a_new_watch() -> None:
    old = passes(*steady(0, 2, 5), gang=0)
    assert old is not None and old.seconds_per_step == 2
    new = watch(old, p(4), 1, R, at(100))
    assert new == Watch(gang=1, step=4, since=at(100))
    assert deadline_of(new, RunPolicy()) is None


def test_step_time_is_smoothed_and_pauses_are_no_sample() -> None:
    w = passes(*steady(0, 10, 3))
    assert w is not None and w.seconds_per_step == 10
    w = watch(w, p(3), 0, R, at(40))  # one 20 s step: a quarter of the way there
    assert w is not None and w.seconds_per_step == pytest.approx(12.5)
    w = watch(w, p(3, activity="checkpointing"), 0, R, at(400))
    w = watch(w, p(4), 0, R, at(410))  # 370 s since the last move, but mostly a pause
    assert w is not None and w.seconds_per_step == pytest.approx(12.5)
    w = watch(w, p(5), 0, R, at(422))
    assert w is not None and w.seconds_per_step == pytest.approx(12.5 + (12 - 12.5) / 4)


def test_several_steps_per_report_divide_the_interval() -> None:
    w = passes((0, R, p(0)), (5, R, p(2)), (10, R, p(12)))
    assert w is not None and w.seconds_per_step == pytest.approx(0.5)


def test_the_stall_says_how_long_and_why_that_long() -> None:
    w = passes(*steady(0, 60, 3, step0=1198))
    stall = stalled(w, RunPolicy(), at(120 + 612))
    assert stall is not None
    assert stall.describe() == (
        "training stalled: step 1200 has not moved for 612s "
        "(deadline 600s, learned as 10 x 60.0s per step)"
    )
    assert Deadline(600, 2.0).describe() == (
        "deadline 600s, the least learned deadline (10 x 2.0s per step is shorter)"
    )
    assert Deadline(120).describe() == "deadline 120s, runPolicy.progressDeadlineSeconds"


def test_the_status_form_round_trips_and_shows_the_deadline() -> None:
    w = passes(*steady(0, 41.25, 3, step0=10))
    assert w is not None
    said = w.to_status(RunPolicy())
    assert said["deadlineSeconds"] == 600 and said["gang"] == 0 and said["step"] == 12
    assert Watch.from_status(said) == w
    assert "deadlineSeconds" not in w.to_status(OFF)
    assert Watch.from_status({"gang": "x", "since": "garbage"}) is None
    assert Watch.from_status(None) is None


def test_the_explain_text_names_the_constants() -> None:
    """`kubectl explain` says how the default deadline is learned: keep it true."""
    doc = " ".join(str(RunPolicy.model_fields["progressDeadlineSeconds"].description).split())
    assert f"{MULTIPLE} step times, at least {FLOOR_SECONDS}s" in doc
