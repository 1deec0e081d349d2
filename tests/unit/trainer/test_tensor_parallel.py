"""Acceptance of the TensorParallel strategy on CPU over gloo (fp64): TP alone (world 2)
and TP x DP (world 4 as a (dp=2, tp=2) DeviceMesh), for the GPT (qkv split by heads) and
the MLP. One step gives every rank the full-batch gradients (the full tensors of its
DTensor shards, the whole replicated ones); several steps of the real strategy end with the
per-step losses and parameters of single-process training (1e-10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import a_spec, launch
from unit.trainer.ranks import run_ranks
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run
from unit.trainer.tp_models import GPT_DATA, GPT_MODEL

from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.models import build_model, loss_fn


def tp_spec(workers: int, tp: int, model: str = "MLP", **trainer: Any) -> dict[str, Any]:
    """A TensorParallel job of `workers` single-process pods, tp size `tp` (fp64)."""
    if model == "GPT":
        trainer = {"model": GPT_MODEL, "dataset": GPT_DATA, "batchSize": 8, **trainer}
    extra = {"tensorParallel": {"size": tp}}
    return a_spec("TensorParallel", workers=workers, strategy_extra=extra, **trainer)


def one_step(rank: int, world: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Rank body: mesh, split model, one forward/backward of this replica's shard of
    batch 0, gradients averaged over dp; the full gradients and the mesh layout."""
    from unit.trainer.ranks import strategy_context

    from dtjob_trainer.strategies.tensor_parallel import average_over_dp, build_mesh, parallelize

    ctx = strategy_context(spec, rank, world, Path("/nonexistent"))
    tp = ctx.cfg.tensor_parallel.size
    mesh = build_mesh("cpu", world, tp)
    dp = world // tp
    model = parallelize(build_model(ctx.cfg, torch.float64), ctx, mesh)
    data = load_dataset(ctx.cfg, torch.float64)
    x, y = batch(data, 0, ctx.cfg.trainer.batchSize, ctx.cfg.trainer.seed, rank // tp, dp)
    loss = loss_fn(model(x), y)
    loss.backward()
    params = list(model.named_parameters())
    average_over_dp([p for _, p in params], mesh.get_group("dp"), dp)
    split = {n for n, p in params if hasattr(p, "full_tensor")}
    full = {n: (p.grad.full_tensor() if n in split else p.grad).detach() for n, p in params}
    return {
        "coordinate": mesh.get_coordinate(),
        "tp_ranks": torch.distributed.get_process_group_ranks(mesh.get_group("tp")),
        "split": split,
        "local_qkv": {n: p.to_local().shape for n, p in params if n.endswith("qkv.weight")},
        "grads": full,
        "loss": loss.item(),
    }


def full_batch_grads(spec: dict[str, Any]) -> tuple[dict[str, torch.Tensor], float]:
    cfg = load_config(spec)
    model = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    x, y = batch(data, 0, cfg.trainer.batchSize, cfg.trainer.seed)
    loss = loss_fn(model(x), y)
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, loss.item()


@pytest.mark.parametrize(("model", "world", "tp"), [("GPT", 2, 2), ("GPT", 4, 2), ("MLP", 4, 2)])
def test_one_step_gives_full_batch_gradients(
    tmp_path: Path, model: str, world: int, tp: int
) -> None:
    spec = tp_spec(world, tp, model)
    ranks = run_ranks(one_step, world, spec, workdir=tmp_path)
    want, _ = full_batch_grads(spec)
    for rank, r in enumerate(ranks):
        assert tuple(r["coordinate"]) == (rank // tp, rank % tp)
        assert r["tp_ranks"] == list(range(rank - rank % tp, rank - rank % tp + tp))
        assert_params_close(r["grads"], want, "fp64")
    if model == "GPT":
        # Attention and MLP Linears are split; embedding, LayerNorms and head are not.
        assert ranks[0]["split"] == {
            f"{i}.{layer}.{kind}"
            for i in (1, 2)
            for layer in ("qkv", "proj", "fc", "out")
            for kind in ("weight", "bias")
        }
        d = GPT_MODEL["dModel"]
        assert ranks[0]["local_qkv"]["1.qkv.weight"] == (3 * d // tp, d)
    else:
        # hiddenSizes [32, 32, 32]: (0.0 col, 1.0 row), (2.0 col, 3 row).
        assert ranks[0]["split"] == {
            f"{n}.{kind}" for n in ("0.0", "1.0", "2.0", "3") for kind in ("weight", "bias")
        }


def test_qkv_shard_holds_the_ranks_heads(tmp_path: Path) -> None:
    """Rank r's qkv rows are q, k and v of heads [r*h/tp, (r+1)*h/tp): a plain column
    split would hand rank 0 all of q instead, and attention would mix heads."""
    spec = tp_spec(2, 2, "GPT")
    ranks = run_ranks(local_qkv_rows, 2, spec, workdir=tmp_path)
    full = build_model(load_config(spec), torch.float64)[1].qkv.weight.detach()
    d = GPT_MODEL["dModel"]
    for r, local in enumerate(ranks):
        q, k, v = full.split(d)
        half = d // 2
        want = torch.cat([z[r * half : (r + 1) * half] for z in (q, k, v)])
        assert torch.equal(local, want)


def local_qkv_rows(rank: int, world: int, spec: dict[str, Any]) -> torch.Tensor:
    from unit.trainer.ranks import strategy_context

    from dtjob_trainer.strategies.tensor_parallel import build_mesh, parallelize

    ctx = strategy_context(spec, rank, world, Path("/nonexistent"))
    model = parallelize(build_model(ctx.cfg, torch.float64), ctx, build_mesh("cpu", world, 2))
    return model[1].qkv.weight.to_local().detach().clone()


@pytest.mark.parametrize(("model", "world"), [("GPT", 2), ("GPT", 4), ("MLP", 2), ("MLP", 4)])
def test_training_equals_single_process(tmp_path: Path, model: str, world: int) -> None:
    spec = tp_spec(world, 2, model, steps=5, optimizer={"type": "Adam", "lr": 0.01})
    out = launch(spec, tmp_path, "--verify-replicas")
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = reference_run(spec)
    assert out.result["strategy"] == "TensorParallel"
    assert out.result["replicas_checked"] == 5
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ({**GPT_MODEL, "heads": 2, "dModel": 16}, "trainer.model.heads"),
        ({"type": "MLP", "hiddenSizes": [32, 30]}, "trainer.model.hiddenSizes"),
        ({"type": "CNN"}, "trainer.model.type"),
    ],
)
def test_a_model_the_plan_cannot_split_is_refused_naming_the_field(
    model: dict[str, Any], field: str
) -> None:
    from dtjob_trainer.errors import ConfigError
    from dtjob_trainer.models.tp_plan import tp_plan

    data = GPT_DATA if model["type"] == "GPT" else {"type": "Digits"}
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        extra = {"tensorParallel": {"size": 4}}
        load_config(a_spec("TensorParallel", 4, strategy_extra=extra, model=model, dataset=data))
    # The same model splits over a size it divides (CNN never).
    if model["type"] != "CNN":
        extra = {"tensorParallel": {"size": 2}}
        spec = a_spec("TensorParallel", 4, strategy_extra=extra, model=model, dataset=data)
        assert tp_plan(load_config(spec).trainer.model)


def test_workers_not_divisible_by_the_size_are_refused() -> None:
    from dtjob_trainer.errors import ConfigError

    msg = r"^strategy\.tensorParallel\.size: must divide the worker processes .*\(6 worker"
    with pytest.raises(ConfigError, match=msg):
        load_config(tp_spec(6, 4))
    assert load_config(tp_spec(4, 2, batchSize=2)).data_parallel_size() == 2
