"""Acceptance: a run stopped by SIGTERM checkpoints and exits 143; restarted, it resumes
from that checkpoint and ends exactly where an uninterrupted run ends (data order is a
function of (seed, step), optimizer state is restored). DataParallel writes full
checkpoints, FSDP and CPUOffload sharded ones (a directory of every rank's shards)."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from unit.trainer.harness import LAUNCH_SECONDS, a_spec, finish, launch, start_launch, wait_for
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_trainer.checkpoint import LATEST, Checkpointer
from dtjob_trainer.errors import EXIT_PREEMPTED


# Enough steps after the first checkpoint (step 10) for SIGTERM to land before the end even
# on a fast machine; FSDP's steps are several collectives each, so it needs fewer.
@pytest.mark.parametrize(
    ("strategy", "steps"), [("DataParallel", 200), ("FSDP", 80), ("CPUOffload", 80)]
)
def test_sigterm_then_resume_equals_uninterrupted(
    strategy: str, steps: int, tmp_path: Path
) -> None:
    spec = a_spec(
        strategy,
        steps=steps,
        checkpoint_every=10,
        logEverySteps=5,
        batchSize=64,
        model={"type": "MLP", "hiddenSizes": [128, 128, 128]},
        optimizer={"type": "Adam", "lr": 0.003},
    )
    proc, ckpt, result = start_launch(spec, tmp_path)
    wait_for(
        lambda: (ckpt / LATEST).exists() or proc.poll() is not None, LAUNCH_SECONDS, "a checkpoint"
    )
    proc.send_signal(signal.SIGTERM)
    stopped_run = finish(proc, ckpt, result)
    assert stopped_run.rc == EXIT_PREEMPTED, stopped_run.output
    assert "SIGTERM" in stopped_run.output
    stopped_at = Checkpointer(ckpt).steps()[-1]
    assert 0 < stopped_at < steps
    # The checkpoint is of the step the run stopped at, not an earlier one (a sharded save
    # in flight at SIGTERM is waited for, then the stopping step's is written and committed).
    said = re.search(r"stopped by SIGTERM after step (\d+)", stopped_run.output)
    assert said is not None and int(said.group(1)) == stopped_at, stopped_run.output
    name = Checkpointer.file_name if strategy == "DataParallel" else Checkpointer.dir_name
    assert (ckpt / LATEST).read_text() == name(stopped_at)
    assert (ckpt / name(stopped_at)).is_dir() == (strategy != "DataParallel")

    resumed = launch(spec, tmp_path)
    assert resumed.rc == 0, resumed.output
    assert resumed.result is not None
    assert resumed.result["start_step"] == stopped_at
    assert resumed.result["steps"] == steps
    ref = reference_run(spec)
    assert_losses_close(resumed.result["losses"], ref.losses[stopped_at:], "fp64")
    assert_params_close(resumed.result["params"], ref.params, "fp64")

    # The local progress channel saw the end of the run.
    progress = json.loads((ckpt / "progress.json").read_text())
    assert progress["step"] == progress["totalSteps"] == steps
    assert progress["lastCheckpointStep"] == steps
    assert progress["accuracy"] == resumed.result["accuracy"]
    assert progress["loss"] == pytest.approx(ref.losses[-1], abs=1e-10)

    # Started again after the end, it trains nothing and reports the same result.
    again = launch(spec, tmp_path)
    assert again.rc == 0, again.output
    assert again.result is not None
    assert again.result["start_step"] == steps and again.result["losses"] == []
    assert_params_close(again.result["params"], ref.params, "fp64")
    # Only the newest `keep` (2) checkpoints are left.
    assert len(Checkpointer(ckpt).steps()) == 2 and Checkpointer(ckpt).steps()[-1] == steps
