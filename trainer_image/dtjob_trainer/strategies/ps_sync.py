"""ParameterServer, mode Sync: every worker's gradient is averaged every step.

Without ps ranks the workers all-reduce one flat gradient buffer and each applies the same
optimizer step (a hand-written data parallel). With ps ranks (the highest ranks, per the
env contract) every parameter has an owning parameter server (`assign_owners`, balanced by
size): workers reduce their gradients to the owner (one flat bucket per server), the owner
averages them and runs the optimizer for its parameters only, then broadcasts the new
values to everyone. Either way the result equals single-process training on the global
batch. Workers hold full replicas; servers hold full copies kept current by the broadcasts.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.dist import broadcast_object, flat_parameters, host_copy, via_wire
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.evaluate import final_accuracy
from dtjob_trainer.loop import Trainable, run_loop
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.strategies.common import shard_forward_backward

NAME = "ParameterServer/Sync"


def assign_owners(sizes: list[int], servers: int) -> list[int]:
    """Owner server (0-based) of each parameter: largest first onto the least-loaded
    server, ties to the lowest index (deterministic, so every rank agrees)."""
    load = [0] * servers
    owners = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        target = min(range(servers), key=lambda s: (load[s], s))
        owners[i] = target
        load[target] += sizes[i]
    return owners


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _unflat(buffer: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    offset = 0
    for t in tensors:
        t.copy_(buffer[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def run(ctx: RunContext) -> RunResult:
    """Train with synchronous parameter servers (or an all-reduce when there are none)."""
    n_workers = ctx.cfg.role_processes("worker")
    n_ps = ctx.cfg.role_processes("ps")
    is_worker = ctx.rank < n_workers
    model = ctx.build_model().to(ctx.device)
    params = list(model.parameters())
    forward_backward = shard_forward_backward(ctx, model, ctx.rank, n_workers)

    owners = assign_owners([p.numel() for p in params], n_ps) if n_ps else []
    # Parameters of each server, in model order; bucket b belongs to global rank n_workers+b.
    buckets = [[p for p, o in zip(params, owners, strict=True) if o == b] for b in range(n_ps)]
    if not n_ps:
        my_params = params
    elif is_worker:
        my_params = []
    else:
        my_params = buckets[ctx.rank - n_workers]
    optimizer = build_optimizer(my_params, ctx.cfg.trainer.optimizer) if my_params else None

    def grads(ps: list[nn.Parameter]) -> list[torch.Tensor]:
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in ps]

    def step_allreduce(s: int) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = forward_backward(s)
        buffer = _flat(grads(params))
        via_wire(buffer, ctx.wire, dist.all_reduce)
        _unflat(buffer.div_(n_workers), [p.grad for p in params if p.grad is not None])
        assert optimizer is not None
        optimizer.step()
        return loss

    def step_servers(s: int) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = forward_backward(s) if is_worker else torch.zeros((), device=ctx.device)
        for b, bucket in enumerate(buckets):
            owner = n_workers + b
            buffer = (
                _flat(grads(bucket))
                if is_worker
                else torch.zeros(
                    sum(p.numel() for p in bucket), dtype=params[0].dtype, device=ctx.device
                )
            )
            via_wire(buffer, ctx.wire, partial(dist.reduce, dst=owner))
            if ctx.rank == owner:
                for p in bucket:
                    p.grad = torch.zeros_like(p)
                _unflat(buffer.div_(n_workers), [p.grad for p in bucket])  # type: ignore[misc]
        if optimizer is not None:
            optimizer.step()
        with torch.no_grad():
            for b, bucket in enumerate(buckets):
                values = _flat([p.detach() for p in bucket])
                via_wire(values, ctx.wire, partial(dist.broadcast, src=n_workers + b))
                _unflat(values, [p.data for p in bucket])
        return loss

    def state_dict() -> dict[str, Any] | None:
        if not n_ps:
            return _rank0_state(ctx, model, optimizer)
        shard = host_copy(optimizer.state_dict()) if optimizer is not None else None
        shards: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
        dist.gather_object(shard, shards, dst=0)
        if ctx.rank != 0 or shards is None:
            return None
        return {"model": _cpu(model.state_dict()), "server_optimizers": shards[n_workers:]}

    def load_state_dict(state: dict[str, Any] | None) -> None:
        state = broadcast_object(state)
        assert state is not None
        model.load_state_dict(state["model"])
        if n_ps:
            saved = state["server_optimizers"]
            if len(saved) != n_ps:
                raise ConfigError(
                    f"roles.ps: the checkpoint was written with {len(saved)} parameter-server "
                    f"processes, this job has {n_ps}; restore the old count or start afresh"
                )
            if optimizer is not None:
                optimizer.load_state_dict(saved[ctx.rank - n_workers])
        elif optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])

    return run_loop(
        ctx,
        Trainable(
            name=ctx.strategy_name or NAME,
            step=step_servers if n_ps else step_allreduce,
            state_dict=state_dict,
            load_state_dict=load_state_dict,
            evaluate=lambda: final_accuracy(model, ctx) if ctx.rank == 0 else None,
            samples_per_step=ctx.cfg.trainer.batchSize,
            replica=lambda: flat_parameters(model),
        ),
    )


def _cpu(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in sd.items()}


def _rank0_state(
    ctx: RunContext, model: nn.Module, optimizer: torch.optim.Optimizer | None
) -> dict[str, Any] | None:
    # Every worker holds the same replica and optimizer state: rank 0's is the state.
    if ctx.rank != 0 or optimizer is None:
        return None
    return {"model": _cpu(model.state_dict()), "optimizer": optimizer.state_dict()}
