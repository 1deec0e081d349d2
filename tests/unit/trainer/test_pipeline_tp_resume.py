"""3-D parallelism checkpoints: sharded, every tp rank writing its pieces under the unsplit
model's parameter names (so they restore into another layout or strategy), and a SIGTERM +
restart run that ends exactly where an uninterrupted one ends (fp64, 1e-10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unit.trainer.harness import a_spec, launch, stop_after_checkpoint
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run
from unit.trainer.resume_check import resume_equals_reference

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.errors import EXIT_PREEMPTED
from dtjob_trainer.sharded import read_full

MLP = {"type": "MLP", "hiddenSizes": [64, 64, 64]}
ADAM = {"type": "Adam", "lr": 0.003}


def pp_tp_spec(stages: int, tp: int | None, **trainer: Any) -> dict[str, Any]:
    """A 1F1B Pipeline job of `stages` single-process stage pods, each stage split over
    `tp` of them (None: not split); fp64 MLP, Adam."""
    extra: dict[str, Any] = {"pipeline": {"schedule": "1F1B", "microbatches": 2}}
    if tp is not None:
        extra["tensorParallel"] = {"size": tp}
    return a_spec(
        "Pipeline", workers=None, stages=stages, strategy_extra=extra, model=MLP,
        optimizer=ADAM, **trainer,
    )  # fmt: skip


def test_checkpoint_has_full_names_and_restores_into_other_layouts(tmp_path: Path) -> None:
    spec = pp_tp_spec(4, 2, steps=6, checkpoint_every=3)
    first = launch(spec, tmp_path)
    assert first.rc == 0, first.output
    ckpt = Checkpointer(first.checkpoint_dir).load_latest()
    assert ckpt is not None and ckpt.step == 6 and ckpt.sharded and ckpt.path is not None
    # Each of the 4 ranks (2 stages x tp 2) wrote its own pieces, read back as whole tensors
    # under the unsplit model's names: the reference's parameters at step 6.
    assert sorted(f.name for f in ckpt.path.glob("*.distcp")) == [
        f"__{r}_0.distcp" for r in range(4)
    ]
    assert_params_close(read_full(ckpt.path)["model"], reference_run(spec).params, "fp64")

    # A pipeline without tensor parallelism continues the same training from it.
    longer = reference_run({**spec, "trainer": {**spec["trainer"], "steps": 9}})
    plain = pp_tp_spec(2, None, steps=9, checkpoint_every=3)
    second = launch(plain, tmp_path)
    assert second.rc == 0, second.output
    assert second.result is not None and second.result["start_step"] == 6
    assert_losses_close(second.result["losses"], longer.losses[6:], "fp64")
    assert_params_close(second.result["params"], longer.params, "fp64")


def test_sigterm_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    steps = 80
    spec = pp_tp_spec(4, 2, steps=steps, checkpoint_every=10, logEverySteps=5, batchSize=64)
    stopped = stop_after_checkpoint(spec, tmp_path)
    assert stopped.rc == EXIT_PREEMPTED, stopped.output
    assert "SIGTERM" in stopped.output
    stopped_at = Checkpointer(stopped.checkpoint_dir).steps()[-1]
    assert 0 < stopped_at < steps

    resume_equals_reference(spec, tmp_path, stopped_at)
