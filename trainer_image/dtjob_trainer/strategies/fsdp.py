"""FSDP: ZeRO-3 sharding with FSDP2 `fully_shard`. Every block of the model and then the
root are sharded over a 1-D DeviceMesh of all processes; parameters are all-gathered for
compute and gradients reduce-scattered (averaged). `offload_policy` lets CPUOffload reuse
this module with parameters and optimizer state kept in host memory.

The model is built on the meta device, sharded, and only then are the shards allocated and
initialised (`meta_init`), so no process holds the full model on the device (or the full
model in host memory). With bf16 precision FSDP2's MixedPrecisionPolicy computes with bf16
parameters and reduces fp32 gradients into fp32 shards. Checkpoints are sharded
(`dtjob_trainer.sharded`): every rank writes its own shards, and a run resumes at any
process count."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

from dtjob_api.spec import Precision
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.dist import flat_parameters
from dtjob_trainer.evaluate import final_accuracy
from dtjob_trainer.loop import Trainable, run_loop
from dtjob_trainer.meta_init import materialize_sharded
from dtjob_trainer.models import build_model
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.sharded import ShardedState
from dtjob_trainer.speed import apply_block_options
from dtjob_trainer.state import gather_full_state, load_full_state
from dtjob_trainer.strategies.common import shard_forward_backward

NAME = "FSDP"


def run(ctx: RunContext) -> RunResult:
    """Train with FSDP2 over every process of the job."""
    return run_sharded(ctx, OffloadPolicy(), ctx.strategy_name or NAME)


def mixed_precision(precision: Precision) -> MixedPrecisionPolicy:
    """bf16: parameters all-gathered and computed in bf16, gradients reduced in fp32 into
    the fp32 shards the optimizer steps (half the all-gather traffic and parameter memory
    of compute); other precisions: the shards' own dtype throughout."""
    if precision == Precision.BF16:
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def shard_model(ctx: RunContext, offload: OffloadPolicy) -> nn.Sequential:
    """The configured model, built on the meta device, sharded block by block and then at
    the root over all processes, and only then materialised: each rank allocates and
    initialises its own shards."""
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    policy = mixed_precision(ctx.cfg.trainer.precision)
    t = ctx.cfg.trainer
    model = build_model(ctx.cfg, ctx.dtype, meta=True)
    # Checkpointing and compilation wrap each block before fully_shard does (torchtitan's
    # order), so the all-gathers stay outside the compiled and recomputed regions.
    apply_block_options(model, t.activationCheckpointing, t.compile)
    for block in model:
        fully_shard(block, mesh=mesh, offload_policy=offload, mp_policy=policy)
    fully_shard(model, mesh=mesh, offload_policy=offload, mp_policy=policy)
    # With CPU offload the shards live (and stay) in host memory; FSDP moves each block to
    # the device for its forward/backward.
    offloading = isinstance(offload, CPUOffloadPolicy)
    materialize_sharded(
        model, ctx.cfg, ctx.dtype, torch.device("cpu") if offloading else ctx.device
    )
    return model


def run_sharded(ctx: RunContext, offload: OffloadPolicy, name: str) -> RunResult:
    """Shard the model and train it with the shared loop."""
    model = shard_model(ctx, offload)
    optimizer = build_optimizer(model.parameters(), ctx.cfg.trainer.optimizer)
    forward_backward = shard_forward_backward(ctx, model, ctx.rank, ctx.world_size)

    def step(s: int) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = forward_backward(s)
        optimizer.step()
        return loss

    return run_loop(
        ctx,
        Trainable(
            name=name,
            step=step,
            state_dict=lambda: gather_full_state(model, optimizer, ctx.rank),
            load_state_dict=lambda state: load_full_state(model, optimizer, state),
            sharded=ShardedState(model, optimizer),
            save_sharded=True,
            # Sharded forward passes are collectives: every rank evaluates, rank 0 reports.
            evaluate=lambda: _accuracy_on_rank0(ctx, model),
            samples_per_step=ctx.cfg.trainer.batchSize,
            replica=lambda: flat_parameters(model),
        ),
    )


def _accuracy_on_rank0(ctx: RunContext, model: torch.nn.Module) -> float | None:
    value = final_accuracy(model, ctx)
    return value if ctx.rank == 0 else None
