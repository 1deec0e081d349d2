"""TensorParallel checkpoints: full state under the unsplit model's parameter names (so
they restore into another tp size or another strategy), and a SIGTERM + restart run that
ends exactly where an uninterrupted one ends (fp64, 1e-10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unit.trainer.harness import a_spec, launch, stop_after_checkpoint
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run
from unit.trainer.resume_check import resume_equals_reference

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.errors import EXIT_PREEMPTED

MLP = {"type": "MLP", "hiddenSizes": [64, 64, 64]}
ADAM = {"type": "Adam", "lr": 0.003}


def tp_spec(workers: int, tp: int, **trainer: Any) -> dict[str, Any]:
    """A TensorParallel job of `workers` single-process pods, tp size `tp` (fp64 MLP)."""
    extra = {"tensorParallel": {"size": tp}}
    spec = a_spec("TensorParallel", workers=workers, strategy_extra=extra, **trainer)
    return spec


def test_checkpoint_has_full_names_and_restores_into_other_layouts(tmp_path: Path) -> None:
    spec = tp_spec(4, 2, steps=6, checkpoint_every=3, model=MLP, optimizer=ADAM)
    first = launch(spec, tmp_path)
    assert first.rc == 0, first.output
    ckpt = Checkpointer(first.checkpoint_dir).load_latest()
    assert ckpt is not None and ckpt.step == 6 and not ckpt.sharded
    assert ckpt.strategy == "TensorParallel"
    # Whole tensors under the unsplit model's names: the reference's parameters at step 6.
    assert_params_close(ckpt.state["model"], reference_run(spec).params, "fp64")

    # Resumed with another tp size (the whole group is one replica) and then with another
    # strategy, it continues the same training.
    longer = reference_run({**spec, "trainer": {**spec["trainer"], "steps": 12}})
    tp4 = tp_spec(4, 4, steps=9, checkpoint_every=3, model=MLP, optimizer=ADAM)
    second = launch(tp4, tmp_path)
    assert second.rc == 0, second.output
    assert second.result is not None and second.result["start_step"] == 6
    assert_losses_close(second.result["losses"], longer.losses[6:9], "fp64")

    ddp = a_spec("DataParallel", workers=2, steps=12, model=MLP, optimizer=ADAM)
    third = launch(ddp, tmp_path)
    assert third.rc == 0, third.output
    assert third.result is not None and third.result["start_step"] == 9
    assert_losses_close(third.result["losses"], longer.losses[9:], "fp64")
    assert_params_close(third.result["params"], longer.params, "fp64")


def test_sigterm_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    steps = 120
    spec = tp_spec(4, 2, steps=steps, checkpoint_every=10, logEverySteps=5, batchSize=64,
                   model=MLP, optimizer=ADAM)  # fmt: skip
    stopped_run = stop_after_checkpoint(spec, tmp_path)
    ckpt = stopped_run.checkpoint_dir
    assert stopped_run.rc == EXIT_PREEMPTED, stopped_run.output
    assert "SIGTERM" in stopped_run.output
    stopped_at = Checkpointer(ckpt).steps()[-1]
    assert 0 < stopped_at < steps

    resume_equals_reference(spec, tmp_path, stopped_at)
