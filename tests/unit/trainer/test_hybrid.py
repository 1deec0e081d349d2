"""Acceptance of the Hybrid strategy (pipeline x data parallel) on CPU over gloo, 4 ranks
as a (pp=2, dp=2) DeviceMesh: the mesh follows the env contract's rank order
(rank = pp_index * dp + dp_index); one step gives the full-batch gradients on every replica
and each replica's last stage the reference losses of its micro-batches (fp64 within 1e-10);
several steps of the real strategy end with the parameters of single-process training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from unit.trainer.harness import a_spec, launch
from unit.trainer.ranks import run_ranks
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.models import build_model, loss_fn
from dtjob_trainer.strategies.hybrid import build_mesh
from dtjob_trainer.strategies.pipeline import (
    average_gradients,
    build_pipeline,
    local_module,
    make_plan,
    pipeline_step,
)

DP = 2


def hybrid_spec(schedule: str, microbatches: int, **trainer: Any) -> dict[str, Any]:
    """A Hybrid job of 4 single-process stage pods, data-parallel degree 2 (fp64 MLP)."""
    extra = {
        "pipeline": {"schedule": schedule, "microbatches": microbatches, "stagesPerRank": 2},
        "hybrid": {"dataParallel": DP},
    }
    return a_spec("Hybrid", workers=None, stages=4, strategy_extra=extra, **trainer)


def one_step(rank: int, world: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Rank body: mesh, this replica's pipeline, one step of batch 0, dp gradient average."""
    cfg = load_config(spec)
    mesh = build_mesh("cpu", world, DP)
    pp_rank, dp_rank = divmod(rank, DP)
    p = cfg.pipeline
    plan = make_plan(p.schedule, p.microbatches, p.stagesPerRank, world // DP, pp_rank)
    pp_group, dp_group = mesh.get_group("pp"), mesh.get_group("dp")
    schedule, stages = build_pipeline(
        build_model(cfg, torch.float64), plan, torch.device("cpu"), pp_group
    )
    data = load_dataset(cfg, torch.float64)
    x, y = batch(data, 0, cfg.trainer.batchSize, cfg.trainer.seed, dp_rank, DP)
    losses, _ = pipeline_step(schedule, plan, x, y)
    params = list(local_module(stages).named_parameters())
    average_gradients([q for _, q in params], dp_group, DP)
    return {
        "coordinate": mesh.get_coordinate(),
        "pp_ranks": torch.distributed.get_process_group_ranks(pp_group),
        "dp_ranks": torch.distributed.get_process_group_ranks(dp_group),
        "grads": {n: q.grad.clone() for n, q in params if q.grad is not None},
        "losses": [loss.item() for loss in losses],
    }


def test_mesh_layout_and_one_step_equal_full_batch(tmp_path: Path) -> None:
    spec = hybrid_spec("1F1B", microbatches=2)
    ranks = run_ranks(one_step, 4, spec, workdir=tmp_path)

    for rank, r in enumerate(ranks):
        assert tuple(r["coordinate"]) == (rank // DP, rank % DP)
    assert [r["pp_ranks"] for r in ranks] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [r["dp_ranks"] for r in ranks] == [[0, 1], [0, 1], [2, 3], [2, 3]]

    cfg = load_config(spec)
    model = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    x, y = batch(data, 0, cfg.trainer.batchSize, cfg.trainer.seed)
    loss_fn(model(x), y).backward()
    want = {n: q.grad for n, q in model.named_parameters() if q.grad is not None}
    # Both replicas of a stage hold the averaged (= full-batch) gradient after the step.
    for replica in range(DP):
        grads = {n: g for r in ranks[replica::DP] for n, g in r["grads"].items()}
        assert_params_close(grads, want, "fp64")

    with torch.no_grad():
        for replica in range(DP):
            xs, ys = x.chunk(DP)[replica], y.chunk(DP)[replica]
            micro = zip(xs.chunk(2), ys.chunk(2), strict=True)
            expected = [loss_fn(model(xc), yc).item() for xc, yc in micro]
            last_stage = ranks[DP + replica]  # pp_index 1
            assert_losses_close(last_stage["losses"], expected, "fp64")
            assert ranks[replica]["losses"] == []


def test_training_equals_single_process(tmp_path: Path) -> None:
    spec = hybrid_spec("Interleaved1F1B", microbatches=2, steps=6)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = reference_run(spec)
    assert out.result["strategy"] == "Hybrid"
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")
