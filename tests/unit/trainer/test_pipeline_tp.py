"""Acceptance of 3-D parallelism (Pipeline or Hybrid with strategy.tensorParallel) on CPU
over gloo, fp64: the stage ranks form a (pp, dp, tp) DeviceMesh in the env contract's
order (rank = (pp_index * dp + dp_index) * tp + tp_index); one step gives every rank the
full-batch gradients of its stage (the full tensors of its shards) and the last stage the
reference losses of its micro-batches; several Adam steps of the real strategy end with the
per-step losses and parameters of single-process training (1e-10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed import get_process_group_ranks
from unit.trainer.harness import a_spec, launch
from unit.trainer.ranks import run_ranks
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run
from unit.trainer.tp_models import GPT_DATA, GPT_MODEL

from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.models import build_model, loss_fn
from dtjob_trainer.strategies.pipeline import build_pipeline, local_module, make_plan, pipeline_step
from dtjob_trainer.strategies.pipeline_tp import build_mesh, coordinate
from dtjob_trainer.strategies.stage_tp import StageTP
from dtjob_trainer.strategies.tensor_parallel import average_over_dp

# 3 hidden layers + the classifier, 2 stages: (0.0 col, 1.0 row) and (2.0 col, 3 row).
MLP_MODEL = {"type": "MLP", "hiddenSizes": [32, 32, 32]}
ADAM = {"type": "Adam", "lr": 0.01}


def spec_3d(
    stages: int, tp: int, dp: int = 1, schedule: str = "1F1B", model: str = "GPT", **trainer: Any
) -> dict[str, Any]:
    """A Pipeline (dp 1) or Hybrid job of `stages` single-process stage pods, every stage
    split over `tp` of them (fp64)."""
    extra: dict[str, Any] = {
        "pipeline": {"schedule": schedule, "microbatches": 2},
        "tensorParallel": {"size": tp},
    }
    if dp > 1:
        extra["hybrid"] = {"dataParallel": dp}
    if model == "GPT":
        trainer = {"model": GPT_MODEL, "dataset": GPT_DATA, "batchSize": 8, **trainer}
    else:
        trainer = {"model": MLP_MODEL, **trainer}
    strategy = "Hybrid" if dp > 1 else "Pipeline"
    return a_spec(strategy, workers=None, stages=stages, strategy_extra=extra, **trainer)


def one_step(rank: int, world: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Rank body: mesh, this rank's split stage, one step of its replica's shard of batch 0,
    gradients averaged over dp; the full gradients, losses and mesh groups."""
    cfg = load_config(spec)
    dp = cfg.data_parallel_size()
    tp = cfg.stage_tensor_parallel_size()
    mesh = build_mesh("cpu", world, dp, tp)
    pp_rank, dp_rank, tp_rank = coordinate(rank, dp, tp)
    p = cfg.pipeline
    plan = make_plan(p.schedule, p.microbatches, p.stagesPerRank, world // (dp * tp), pp_rank)
    stage_tp = StageTP(mesh["tp"], tp_rank, cfg.trainer.model)
    schedule, stages = build_pipeline(
        build_model(cfg, torch.float64), plan, torch.device("cpu"), mesh.get_group("pp"), stage_tp
    )
    data = load_dataset(cfg, torch.float64)
    x, y = batch(data, 0, cfg.trainer.batchSize, cfg.trainer.seed, dp_rank, dp)
    losses, _ = pipeline_step(schedule, plan, x, y)
    params = list(local_module(stages).named_parameters())
    average_over_dp([q for _, q in params], mesh.get_group("dp"), dp)
    split = {n for n, q in params if hasattr(q, "full_tensor")}
    return {
        "coordinate": tuple(mesh.get_coordinate() or ()),
        "groups": {d: get_process_group_ranks(mesh.get_group(d)) for d in ("pp", "dp", "tp")},
        "split": split,
        "grads": {
            n: (q.grad.full_tensor() if n in split else q.grad).detach().clone() for n, q in params
        },
        "losses": [loss.item() for loss in losses],
    }


def full_batch(spec: dict[str, Any]) -> tuple[dict[str, torch.Tensor], list[list[float]]]:
    """Single-process gradients of batch 0, and each replica's micro-batch losses."""
    cfg = load_config(spec)
    dp = cfg.data_parallel_size()
    model = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    x, y = batch(data, 0, cfg.trainer.batchSize, cfg.trainer.seed)
    loss_fn(model(x), y).backward()
    grads = {n: q.grad for n, q in model.named_parameters() if q.grad is not None}
    with torch.no_grad():
        micro = cfg.pipeline.microbatches
        losses = [
            [
                loss_fn(model(xc), yc).item()
                for xc, yc in zip(xs.chunk(micro), ys.chunk(micro), strict=True)
            ]
            for xs, ys in zip(x.chunk(dp), y.chunk(dp), strict=True)
        ]
    return grads, losses


@pytest.mark.parametrize(
    ("model", "stages", "tp", "dp", "schedule"),
    [("GPT", 4, 2, 1, "1F1B"), ("MLP", 4, 2, 1, "GPipe"), ("GPT", 8, 2, 2, "1F1B")],
)
def test_one_step_gives_full_batch_gradients(
    tmp_path: Path, model: str, stages: int, tp: int, dp: int, schedule: str
) -> None:
    spec = spec_3d(stages, tp, dp, schedule, model)
    ranks = run_ranks(one_step, stages, spec, workdir=tmp_path)
    want, losses = full_batch(spec)
    pp = stages // (dp * tp)
    for rank, r in enumerate(ranks):
        coord = (rank // (dp * tp), rank // tp % dp, rank % tp)
        assert r["coordinate"] == coord
        base = rank - rank % tp
        assert r["groups"]["tp"] == list(range(base, base + tp))
        assert r["groups"]["dp"] == [coord[0] * dp * tp + d * tp + coord[2] for d in range(dp)]
        assert r["groups"]["pp"] == [s * dp * tp + coord[1] * tp + coord[2] for s in range(pp)]
        assert r["split"], f"rank {rank}: nothing of its stage is split"
    for d in range(dp):
        for t in range(tp):
            # One pipeline chain (replica d, tp index t) holds the whole model's gradients.
            chain = [ranks[s * dp * tp + d * tp + t] for s in range(pp)]
            assert_params_close({n: g for r in chain for n, g in r["grads"].items()}, want, "fp64")
            assert_losses_close(chain[-1]["losses"], losses[d], "fp64")
            assert all(r["losses"] == [] for r in chain[:-1])
    if model == "GPT":
        # Stage 0 holds the embedding and block 1, stage 1 block 2 and the head.
        assert ranks[0]["split"] == {
            f"1.{layer}.{kind}"
            for layer in ("qkv", "proj", "fc", "out")
            for kind in ("weight", "bias")
        }
    else:
        assert ranks[0]["split"] == {f"{n}.{k}" for n in ("0.0", "1.0") for k in ("weight", "bias")}
        assert ranks[-1]["split"] == {f"{n}.{k}" for n in ("2.0", "3") for k in ("weight", "bias")}


@pytest.mark.parametrize(
    ("model", "stages", "dp", "schedule"),
    [("GPT", 4, 1, "1F1B"), ("MLP", 4, 1, "Interleaved1F1B"), ("MLP", 8, 2, "GPipe")],
)
def test_training_equals_single_process(
    tmp_path: Path, model: str, stages: int, dp: int, schedule: str
) -> None:
    spec = spec_3d(stages, 2, dp, schedule, model, steps=4, optimizer=ADAM)
    if schedule == "Interleaved1F1B":
        # 2 ranks x 2 chunks = 4 stages of the 4 MLP blocks, one Linear each: no pair fits a
        # stage, so give each stage a whole (column, row) pair: 8 blocks.
        spec["trainer"]["model"] = {"type": "MLP", "hiddenSizes": [32] * 7}
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = reference_run(spec)
    assert out.result["strategy"] == ("Hybrid" if dp > 1 else "Pipeline")
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")
