"""Acceptance of the ModelParallel strategy on CPU over gloo: the model's blocks on four
ranks, one micro-batch. One step gives the full-batch gradients and the loss of the whole
model (fp64 within 1e-10); several steps of the real strategy end with the parameters and
losses of single-process training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from unit.trainer.harness import a_spec, launch
from unit.trainer.ranks import run_ranks
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_api.spec import PipelineSchedule
from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.models import build_model, loss_fn
from dtjob_trainer.strategies.pipeline import build_pipeline, local_module, make_plan, pipeline_step


def model_parallel_spec(stages: int, **trainer: Any) -> dict[str, Any]:
    """A ModelParallel job of `stages` single-process stage pods (fp64 MLP, 4 blocks)."""
    return a_spec("ModelParallel", workers=None, stages=stages, **trainer)


def one_step(rank: int, world: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Rank body: the ModelParallel plan (GPipe, one micro-batch) for one step of batch 0."""
    cfg = load_config(spec)
    plan = make_plan(PipelineSchedule.GPIPE, 1, 1, world, rank)
    schedule, stages = build_pipeline(build_model(cfg, torch.float64), plan, torch.device("cpu"))
    x, y = batch(load_dataset(cfg, torch.float64), 0, cfg.trainer.batchSize, cfg.trainer.seed)
    losses, _ = pipeline_step(schedule, plan, x, y)
    params = local_module(stages).named_parameters()
    return {
        "grads": {n: q.grad.clone() for n, q in params if q.grad is not None},
        "losses": [loss.item() for loss in losses],
    }


def test_one_step_on_four_stages_equals_whole_model(tmp_path: Path) -> None:
    spec = model_parallel_spec(4)
    ranks = run_ranks(one_step, 4, spec, workdir=tmp_path)

    cfg = load_config(spec)
    model = build_model(cfg, torch.float64)
    x, y = batch(load_dataset(cfg, torch.float64), 0, cfg.trainer.batchSize, cfg.trainer.seed)
    loss = loss_fn(model(x), y)
    loss.backward()
    want = {n: q.grad for n, q in model.named_parameters() if q.grad is not None}

    # Each of the 4 blocks (Linear + ReLU, the last a Linear) lives on its own rank.
    assert [sorted(r["grads"]) for r in ranks] == [
        [f"{i}.0.bias", f"{i}.0.weight"] for i in range(3)
    ] + [["3.bias", "3.weight"]]
    grads = {n: g for r in ranks for n, g in r["grads"].items()}
    assert_params_close(grads, want, "fp64")
    assert [r["losses"] for r in ranks[:3]] == [[], [], []]
    assert_losses_close(ranks[3]["losses"], [loss.item()], "fp64")


def test_training_equals_single_process(tmp_path: Path) -> None:
    spec = model_parallel_spec(2, steps=8, optimizer={"type": "SGD", "lr": 0.1, "momentum": 0.9})
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = reference_run(spec)
    assert out.result["strategy"] == "ModelParallel"
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")
