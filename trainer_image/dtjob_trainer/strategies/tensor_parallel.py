"""TensorParallel: Megatron-style tensor parallelism (models/tp_plan.py), alone or combined
with data parallelism on a 2-D DeviceMesh ("dp", "tp").

The worker processes form a (dp, tp) grid in row-major order: rank = dp_index * tp +
tp_index, so the tp peers of a replica are consecutive ranks, i.e. the processes of one pod
when procsPerPod equals the tp size (tensor parallelism talks twice per layer and wants the
fastest links). Each replica (row of the grid) trains on its contiguous shard of the global
batch; after backward every rank averages its gradients (local shards of the split
parameters, whole replicated ones) with the same tp position of the other replicas, one
flat all-reduce over "dp", so every replica takes the full-batch step.

Why a plain all-reduce over dp rather than FSDP2 `fully_shard` over dp: it is what Hybrid
already does over its dp dimension, it keeps the replicated parameters whole (DDP-like,
the usual TP x DP), and it leaves the head-wise qkv layout (a strided shard over tp) to one
owner; sharding the replicas too (ZeRO-3 x TP) is FSDP's job and not what this strategy
offers. Checkpoints are full (gathered to rank 0 under the unsplit model's names), so they
restore into any layout and any strategy that reads full checkpoints.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module

from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.dist import flat_parameters
from dtjob_trainer.evaluate import final_accuracy
from dtjob_trainer.loop import Trainable, run_loop
from dtjob_trainer.models.tp_plan import tp_plan
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.state import gather_full_state, load_full_state
from dtjob_trainer.strategies.common import shard_forward_backward

NAME = "TensorParallel"


def build_mesh(device_type: str, world_size: int, tp: int) -> DeviceMesh:
    """The ("dp", "tp") mesh over every rank (the config's rules: tp divides them)."""
    return init_device_mesh(device_type, (world_size // tp, tp), mesh_dim_names=("dp", "tp"))


def parallelize(model: nn.Sequential, ctx: RunContext, mesh: DeviceMesh) -> nn.Sequential:
    """Split `model` (built whole and seeded, so every rank cuts the same tensors) over the
    mesh's "tp" dimension with the configured model's plan."""
    plan = tp_plan(ctx.cfg.trainer.model)
    parallelize_module(model, mesh["tp"], plan)
    return model


def local_grads(params: list[nn.Parameter]) -> list[torch.Tensor]:
    """Each parameter's gradient as the tensor this rank holds (the local shard of a DTensor
    gradient, which the optimizer reads through the DTensor)."""
    out = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        g = p.grad
        out.append(g.to_local() if isinstance(g, DTensor) else g)
    return out


def average_over_dp(
    params: list[nn.Parameter], dp_group: dist.ProcessGroup | None, dp: int
) -> None:
    """Average this rank's gradients with its dp peers (same tp position) in one flat
    all-reduce; the results are written back into the gradients' local tensors."""
    if dp == 1:
        return
    grads = local_grads(params)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=dp_group)
    flat.div_(dp)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def run(ctx: RunContext) -> RunResult:
    """Train with tensor parallelism over groups of strategy.tensorParallel.size workers
    and data parallelism across the groups."""
    tp = ctx.cfg.tensor_parallel.size
    mesh = build_mesh(ctx.device.type, ctx.world_size, tp)
    dp_rank, tp_rank = divmod(ctx.rank, tp)
    dp = ctx.world_size // tp
    model = parallelize(ctx.build_model().to(ctx.device), ctx, mesh)
    params = list(model.parameters())
    optimizer = build_optimizer(params, ctx.cfg.trainer.optimizer)
    forward_backward = shard_forward_backward(ctx, model, dp_rank, dp)
    dp_group = mesh.get_group("dp")

    def step(s: int) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = forward_backward(s)
        average_over_dp(params, dp_group, dp)
        optimizer.step()
        # The loop sums the shares over all ranks: the tp peers of a replica computed the
        # same loss, so one of them reports it.
        return loss if tp_rank == 0 else torch.zeros_like(loss)

    return run_loop(
        ctx,
        Trainable(
            name=ctx.strategy_name or NAME,
            step=step,
            state_dict=lambda: gather_full_state(model, optimizer, ctx.rank),
            load_state_dict=lambda state: load_full_state(model, optimizer, state),
            # The forward pass is a collective over tp: every rank evaluates.
            evaluate=lambda: _accuracy_on_rank0(ctx, model),
            samples_per_step=ctx.cfg.trainer.batchSize,
            replica=lambda: flat_parameters(model),
        ),
    )


def _accuracy_on_rank0(ctx: RunContext, model: nn.Module) -> float | None:
    value = final_accuracy(model, ctx)
    return value if ctx.rank == 0 else None
