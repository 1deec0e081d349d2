"""Acceptance: a PipeDream or PipeDream2BW run stopped by SIGTERM checkpoints at a step
boundary (the pipeline drained) and exits 143; restarted, it ends exactly where an
uninterrupted run ends, i.e. on the single-process reference of its update rule (fp64,
1e-10). 2BW's checkpoint carries the shadow buffer W(t-1) its next step computes with;
PipeDream's carries no stash (nothing is in flight between steps)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from unit.trainer.harness import a_spec, launch, stop_after_checkpoint
from unit.trainer.pipedream_reference import pipedream_reference, two_bw_reference
from unit.trainer.reference import Reference, assert_losses_close, assert_params_close

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.errors import EXIT_PREEMPTED

STEPS = 150  # enough after the first checkpoint (step 10) for SIGTERM to land before the end


@pytest.mark.parametrize("schedule", ["PipeDream", "PipeDream2BW"])
def test_sigterm_then_resume_equals_uninterrupted(schedule: str, tmp_path: Path) -> None:
    spec = a_spec(
        "Pipeline",
        workers=None,
        stages=2,
        strategy_extra={"pipeline": {"schedule": schedule, "microbatches": 4}},
        steps=STEPS,
        checkpoint_every=10,
        logEverySteps=5,
        optimizer={"type": "Adam", "lr": 0.003},
    )
    stopped_run = stop_after_checkpoint(spec, tmp_path)
    ckpt = stopped_run.checkpoint_dir
    assert stopped_run.rc == EXIT_PREEMPTED, stopped_run.output
    stopped_at = Checkpointer(ckpt).steps()[-1]
    assert 0 < stopped_at < STEPS

    saved = Checkpointer(ckpt).load_latest()
    assert saved is not None and saved.step == stopped_at
    ref: Reference
    if schedule == "PipeDream2BW":
        ref = two_bw_reference(spec)
        # The shadow is W(t-1): the reference's weights after stopped_at - 1 steps.
        before = two_bw_reference({**spec, "trainer": {**spec["trainer"], "steps": stopped_at - 1}})
        assert sorted(saved.state["shadow"]) == sorted(saved.state["model"])
        assert_params_close(saved.state["shadow"], before.params, "fp64")
    else:
        ref = pipedream_reference(spec, stages=2)
        assert "shadow" not in saved.state
    assert not torch.equal(
        next(iter(saved.state["model"].values())), next(iter(ref.params.values()))
    )

    resumed = launch(spec, tmp_path)
    assert resumed.rc == 0, resumed.output
    assert resumed.result is not None
    assert resumed.result["start_step"] == stopped_at
    assert_losses_close(resumed.result["losses"], ref.losses[stopped_at:], "fp64")
    assert_params_close(resumed.result["params"], ref.params, "fp64")
