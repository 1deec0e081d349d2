"""FSDP with bf16 precision: FSDP2's MixedPrecisionPolicy computes with bf16 parameters
(all-gathered in bf16) while the shards, their gradients and the optimizer stay fp32; and
training still follows the fp32 trajectory closely."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import a_spec, launch
from unit.trainer.ranks import run_ranks, strategy_context
from unit.trainer.reference import reference_run


def _dtypes_in_forward(rank: int, world: int, spec: dict[str, Any], workdir: str) -> dict[str, Any]:
    """Rank body: one forward/backward of the sharded model; the dtypes seen."""
    from torch.distributed.fsdp import OffloadPolicy

    from dtjob_trainer.data import batch
    from dtjob_trainer.models import loss_fn
    from dtjob_trainer.strategies.fsdp import shard_model

    ctx = strategy_context(spec, rank, world, Path(workdir))
    model = shard_model(ctx, OffloadPolicy())
    seen: dict[str, Any] = {}

    def record(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        seen["weight"] = module.weight.dtype
        seen["input"] = args[0].dtype
        seen["output"] = output.dtype

    model[0][0].register_forward_hook(record)
    t = ctx.cfg.trainer
    x, y = batch(ctx.data, 0, t.batchSize, t.seed, rank, world)
    with ctx.autocast():
        loss = loss_fn(model(x), y)
    loss.backward()
    seen["shard"] = model[0][0].weight.dtype
    seen["grad"] = model[0][0].weight.grad.dtype
    return seen


@pytest.mark.parametrize(
    ("precision", "compute"), [("bf16", torch.bfloat16), ("fp32", torch.float32)]
)
def test_bf16_computes_with_bf16_parameters_and_keeps_fp32_shards(
    precision: str, compute: torch.dtype, tmp_path: Path
) -> None:
    spec = a_spec("FSDP", precision=precision)
    for seen in run_ranks(_dtypes_in_forward, 2, spec, str(tmp_path), workdir=tmp_path):
        assert seen["weight"] == seen["input"] == seen["output"] == compute
        assert seen["shard"] == seen["grad"] == torch.float32


def test_bf16_training_stays_close_to_fp32(tmp_path: Path) -> None:
    spec = a_spec(
        "FSDP", precision="bf16", steps=40, logEverySteps=10, optimizer={"type": "Adam", "lr": 0.01}
    )
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = reference_run(spec)  # fp32 parameters, no autocast: the full-precision run
    got, want = torch.tensor(out.result["losses"]), torch.tensor(ref.losses)
    assert got[-5:].mean() < 0.25 * got[:5].mean()  # it learns
    torch.testing.assert_close(got, want, rtol=0.05, atol=0.02)
    assert not torch.equal(got, want)  # and the bf16 compute really happened
