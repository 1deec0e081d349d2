"""Acceptance of the Pipeline strategy (GPipe, 1F1B, Interleaved1F1B) on CPU over gloo.

One step through a 2-rank pipeline gives the full-batch gradients of the whole model and the
per-micro-batch losses of the reference (fp64 within 1e-10); held-out accuracy through the
pipeline (padded to whole micro-batches) equals the full model's; several steps of the real
strategy end with the parameters of single-process training; 1F1B with fewer micro-batches
than stages is a config error (exit code 2) that names strategy.pipeline.microbatches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import a_spec, launch
from unit.trainer.ranks import run_ranks
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_api.spec import PipelineSchedule
from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.errors import EXIT_CONFIG, ConfigError
from dtjob_trainer.evaluate import accuracy
from dtjob_trainer.models import build_model, loss_fn
from dtjob_trainer.strategies.pipeline import (
    build_pipeline,
    local_module,
    make_plan,
    pipeline_accuracy,
    pipeline_step,
)

SCHEDULES = ["GPipe", "1F1B", "Interleaved1F1B"]
# Not a multiple of any micro-batch count used here: exercises the padding of the eval set.
EVAL_SAMPLES = 37
# Chunks smaller than the set and not a divisor of it: a padded last chunk is scored right.
EVAL_CHUNK = 16
DEVICE = torch.device("cpu")


def pipeline_spec(schedule: str, stages: int = 2, microbatches: int = 4, **trainer: Any) -> Any:
    """A Pipeline job of `stages` single-process stage pods (fp64 MLP, 4 blocks)."""
    extra = {"pipeline": {"schedule": schedule, "microbatches": microbatches, "stagesPerRank": 2}}
    return a_spec("Pipeline", workers=None, stages=stages, strategy_extra=extra, **trainer)


def one_pipeline_step(rank: int, world: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Rank body: one training pass of the batch of step 0, then an eval pass."""
    cfg = load_config(spec)
    p = cfg.pipeline
    plan = make_plan(p.schedule, p.microbatches, p.stagesPerRank, world, rank)
    schedule, stages = build_pipeline(build_model(cfg, torch.float64), plan, torch.device("cpu"))
    data = load_dataset(cfg, torch.float64)
    x, y = batch(data, 0, cfg.trainer.batchSize, cfg.trainer.seed)
    losses, _ = pipeline_step(schedule, plan, x, y)
    grads = {
        n: q.grad.clone() for n, q in local_module(stages).named_parameters() if q.grad is not None
    }
    acc = pipeline_accuracy(
        schedule, plan, data.x_test[:EVAL_SAMPLES], data.y_test[:EVAL_SAMPLES], EVAL_CHUNK, DEVICE
    )
    return {
        "stages": plan.stage_indices(),
        "grads": grads,
        "losses": [loss.item() for loss in losses],
        "accuracy": acc,
    }


def full_batch_reference(spec: dict[str, Any]) -> dict[str, Any]:
    """The unpipelined model on the same batch: gradients, per-micro-batch losses, accuracy."""
    cfg = load_config(spec)
    model = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    x, y = batch(data, 0, cfg.trainer.batchSize, cfg.trainer.seed)
    loss_fn(model(x), y).backward()
    m = cfg.pipeline.microbatches
    with torch.no_grad():
        losses = [
            loss_fn(model(xc), yc).item() for xc, yc in zip(x.chunk(m), y.chunk(m), strict=True)
        ]
    sub = type(data)(
        data.x_train, data.y_train, data.x_test[:EVAL_SAMPLES], data.y_test[:EVAL_SAMPLES]
    )
    grads = {n: q.grad.clone() for n, q in model.named_parameters() if q.grad is not None}
    return {"grads": grads, "losses": losses, "accuracy": accuracy(model, sub, torch.device("cpu"))}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_one_step_equals_full_batch(schedule: str, tmp_path: Path) -> None:
    spec = pipeline_spec(schedule, microbatches=4)
    ranks = run_ranks(one_pipeline_step, 2, spec, workdir=tmp_path)
    want = full_batch_reference(spec)

    if schedule == "Interleaved1F1B":  # round-robin chunks: rank r holds stages r and r + 2
        assert [r["stages"] for r in ranks] == [[0, 2], [1, 3]]
    else:
        assert [r["stages"] for r in ranks] == [[0], [1]]
    grads: dict[str, torch.Tensor] = {}
    for r in ranks:
        assert not set(grads) & set(r["grads"]), "a parameter lives on two ranks"
        grads.update(r["grads"])
    assert_params_close(grads, want["grads"], "fp64")
    # Only the last stage computes the loss: one loss per micro-batch, as the reference.
    assert ranks[0]["losses"] == []
    assert_losses_close(ranks[-1]["losses"], want["losses"], "fp64")
    assert ranks[0]["accuracy"] is None
    assert ranks[-1]["accuracy"] == want["accuracy"]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_training_equals_single_process(schedule: str, tmp_path: Path) -> None:
    spec = pipeline_spec(schedule, microbatches=4, steps=8)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = reference_run(spec)
    assert out.result["strategy"] == "Pipeline"
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")
    model = build_model(load_config(spec), torch.float64)
    model.load_state_dict(ref.params)
    data = load_dataset(load_config(spec), torch.float64)
    assert out.result["accuracy"] == pytest.approx(accuracy(model, data, torch.device("cpu")))


def test_too_few_microbatches_for_1f1b_is_a_config_error() -> None:
    # torch's Schedule1F1B raises when m < stages: dtjob_api's rule refuses it at load.
    msg = r"^strategy\.pipeline\.microbatches: schedule 1F1B needs at least as many"
    with pytest.raises(ConfigError, match=msg) as err:
        load_config(pipeline_spec("1F1B", stages=4, microbatches=2))
    assert err.value.exit_code == EXIT_CONFIG
    assert "(2 micro-batches, 4 pipeline ranks)" in str(err.value)  # says how many
    load_config(pipeline_spec("1F1B", stages=4, microbatches=4))  # enough: accepted
    load_config(pipeline_spec("GPipe", stages=4, microbatches=1))  # GPipe has no minimum


def test_interleaved_microbatches_must_fill_rounds() -> None:
    # 2 ranks, 5 micro-batches: 2 rounds of 2 do not hold 5.
    msg = r"^strategy\.pipeline\.microbatches: schedule Interleaved1F1B needs the micro"
    with pytest.raises(ConfigError, match=msg):
        load_config(pipeline_spec("Interleaved1F1B", stages=2, microbatches=5, batchSize=30))
    plan = make_plan(PipelineSchedule.INTERLEAVED_1F1B, 6, 3, pp_size=2, pp_rank=1)
    assert plan.num_stages == 6 and plan.stage_indices() == [1, 3, 5]


def test_1f1b_config_error_exits_2(tmp_path: Path) -> None:
    out = launch(pipeline_spec("1F1B", stages=2, microbatches=1), tmp_path)
    assert out.rc == EXIT_CONFIG, out.output
    assert "strategy.pipeline.microbatches" in out.output
    assert out.result is None
