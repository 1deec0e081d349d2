"""Goodput (dtjob_api/goodput.py, policies/goodput.py): every second of a job counts its
gang's GPUs once, by phase; a restart moves what it threw away (the steps since the last
checkpoint, the time a stalled step stood still) out of training; a pass that changes
nothing changes nothing; the planner keeps the ledger in status.goodput."""

from __future__ import annotations

import pytest
from unit.operator.builders import at, iso
from unit.operator.planning import DDP, after, ready, run, w

from dtjob_api.goodput import Ledger, summary, totals
from dtjob_api.status import JobPhase
from dtjob_operator.policies.goodput import Restart, advance, lost_work

R, Q, S, T = JobPhase.RUNNING, JobPhase.QUEUED, JobPhase.STARTING, JobPhase.RESTARTING


def _walk(*steps: tuple[float, JobPhase, Restart | None]) -> tuple[Ledger, list[dict[str, float]]]:
    ledger, added = Ledger(), []
    for now, phase, restart in steps:
        ledger, more = advance(ledger, phase, 8, at(now), restart)
        added.append(more)
    return ledger, added


@pytest.mark.parametrize(
    ("steps", "want"),
    [
        # queued 10 s, starting 5 s, training 100 s, then done: all of it counted by phase
        ([(0, Q, None), (10, S, None), (15, R, None), (115, JobPhase.SUCCEEDED, None)],
         {"queued": 80, "starting": 40, "training": 800}),
        # a failure 60 s after the last checkpoint: 60 s of training is lost work
        ([(0, R, None), (100, T, Restart(lost_work=60)), (110, R, None)],
         {"training": 320, "lostWork": 480, "restarting": 80}),
        # a stall: the still 30 s are stalled, the 20 s of steps before it lost work
        ([(0, R, None), (100, T, Restart(lost_work=20, stalled=30))],
         {"training": 400, "stalled": 240, "lostWork": 160}),
        # a restart never moves more than the Running segment had
        ([(0, R, None), (10, T, Restart(lost_work=600))], {"lostWork": 80}),
        # a resize's Restarting is resizing, not restarting
        ([(0, R, None), (50, T, Restart(resize=True)), (60, R, None)],
         {"training": 400, "resizing": 80}),
    ],
)  # fmt: skip
def test_the_ledger_counts_every_second_once_by_phase(
    steps: list[tuple[float, JobPhase, Restart | None]], want: dict[str, float]
) -> None:
    ledger, _ = _walk(*steps)
    assert {k: v for k, v in totals(ledger, None).items() if v} == want


def test_a_pass_that_changes_nothing_writes_nothing_and_readers_count_the_open_segment() -> None:
    ledger, added = _walk((0, R, None), (30, R, None), (60, R, None))
    assert added == [{}, {}, {}]
    assert ledger.to_status() == {"gpuSeconds": {}, "since": iso(0), "phase": "Running", "gpus": 8}
    assert totals(ledger, at(90))["training"] == 720  # the open segment, to the reader's clock
    done, more = advance(ledger, JobPhase.FAILED, 8, at(90))
    assert more == {"training": 720} and done.since is None
    assert advance(done, JobPhase.FAILED, 8, at(200)) == (done, {})
    assert Ledger.from_status(done.to_status()) == done


def test_lost_work_is_the_steps_since_the_checkpoint() -> None:
    assert lost_work({"step": 130, "lastCheckpointStep": 100}, 2.0) == 60
    assert lost_work({"step": 30}, 2.0) == 60  # no checkpoint yet: from step 0
    assert lost_work({"step": 30}, None) == 0 and lost_work(None, 2.0) == 0


def test_the_summary_names_the_goodput_and_the_largest_losses_first() -> None:
    assert summary({"training": 7200, "queued": 1800, "lostWork": 900, "stalled": 0}) == (
        "goodput 73% of 2.8 GPU-hours; lost: queued 18%, lostWork 9%"
    )
    assert summary({}) is None


def test_the_planner_keeps_the_ledger_and_a_failure_loses_the_steps_since_the_checkpoint() -> None:
    starting = after(DDP, now=0)  # 2 workers x 1 GPU, gang created at t=0
    assert starting.obj()["status"]["goodput"] == {
        "gpuSeconds": {}, "since": iso(0), "phase": "Starting", "gpus": 2
    }  # fmt: skip
    running = after(starting, ready(0), ready(1), now=5)
    assert running.obj()["status"]["goodput"]["gpuSeconds"] == {"starting": 10}
    # Progress with a learned pace: 2 s a step, checkpoint at step 10, now at step 25.
    watched = running.copy().with_full_status({
        **running.obj()["status"],
        "progressWatch": {"gang": 0, "step": 25, "secondsPerStep": 2.0},
    })  # fmt: skip
    p = run(watched, ready(0), w(1).failed(exit_code=137, finished_at=60), now=60,
            progress={"step": 25, "lastCheckpointStep": 10})  # fmt: skip
    assert p.status["phase"] == "Restarting"
    # 55 s Running at 2 GPUs: 30 s of it (15 steps x 2 s) lost, 25 s kept.
    assert p.status["goodput"]["gpuSeconds"] == {"starting": 10, "training": 50, "lostWork": 60}
    assert p.gpu_seconds == {"training": 50, "lostWork": 60}
