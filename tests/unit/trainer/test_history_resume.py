"""Acceptance: the real trainer in real processes keeps the loss history on its volume.
metrics.jsonl has one line per logged step with the losses the run computed; a run stopped
by SIGTERM and resumed (after a crash had left lines past its checkpoint) ends with the same
one increasing curve as an uninterrupted run; the bounded curve (history.json locally, the
history ConfigMap in a cluster) matches it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from unit.trainer.harness import LAUNCH_SECONDS, a_spec, finish, launch, start_launch, wait_for

from dtjob_trainer.checkpoint import LATEST, Checkpointer
from dtjob_trainer.errors import EXIT_PREEMPTED
from dtjob_trainer.history import METRICS_FILE, read_metrics
from dtjob_trainer.report import HISTORY_KEY

STEPS, LOG_EVERY = 200, 5
# Logging every 5 steps syncs every 5, so SIGTERM is seen on a logged step and the
# interrupted run's points are exactly those of the uninterrupted one.
SPEC = a_spec(
    "DataParallel",
    steps=STEPS,
    checkpoint_every=10,
    logEverySteps=LOG_EVERY,
    batchSize=64,
    model={"type": "MLP", "hiddenSizes": [128, 128, 128]},
    optimizer={"type": "Adam", "lr": 0.003},
)


def test_sigterm_and_resume_leave_the_curve_of_an_uninterrupted_run(tmp_path: Path) -> None:
    whole = launch(SPEC, tmp_path / "whole")
    assert whole.rc == 0, whole.output
    assert whole.result is not None
    points = read_metrics(whole.checkpoint_dir / METRICS_FILE)
    assert [p["step"] for p in points] == list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))
    # The loss of each line is the run's global loss at that step.
    assert [p["loss"] for p in points] == pytest.approx(
        [whole.result["losses"][p["step"] - 1] for p in points], rel=1e-12
    )
    assert all(p["lr"] == 0.003 and p["samplesPerSecond"] > 0 for p in points)
    assert points[-1]["accuracy"] == whole.result["accuracy"]
    bounded = json.loads((whole.checkpoint_dir / HISTORY_KEY).read_text())
    assert [r[0] for r in bounded["rows"]] == [p["step"] for p in points]

    proc, ckpt, result = start_launch(SPEC, tmp_path / "cut")
    wait_for(
        lambda: (ckpt / LATEST).exists() or proc.poll() is not None, LAUNCH_SECONDS, "a checkpoint"
    )
    proc.send_signal(signal.SIGTERM)
    stopped = finish(proc, ckpt, result)
    assert stopped.rc == EXIT_PREEMPTED, stopped.output
    stopped_at = Checkpointer(ckpt).steps()[-1]
    assert 0 < stopped_at < STEPS
    assert read_metrics(ckpt / METRICS_FILE)[-1]["step"] == stopped_at  # flushed at SIGTERM
    # What a run killed after its checkpoint would have left: points the resume must drop.
    with (ckpt / METRICS_FILE).open("a") as f:
        for step in (stopped_at + 5, stopped_at + 10):
            f.write(json.dumps({"step": step, "loss": 99.0}) + "\n")

    resumed = launch(SPEC, tmp_path / "cut")
    assert resumed.rc == 0, resumed.output
    curve = read_metrics(ckpt / METRICS_FILE)
    assert [p["step"] for p in curve] == [p["step"] for p in points]  # same length, in order
    assert [p["loss"] for p in curve] == pytest.approx([p["loss"] for p in points], rel=1e-9)
    assert curve[-1]["accuracy"] == points[-1]["accuracy"]
    rows = json.loads((ckpt / HISTORY_KEY).read_text())["rows"]
    assert [r[0] for r in rows] == [p["step"] for p in points]
    assert 99.0 not in [r[1] for r in rows]
