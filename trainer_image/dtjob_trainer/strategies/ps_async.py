"""ParameterServer, mode Async (Downpour): workers push gradients and pull parameters
with no barrier.

Each step a worker computes the gradient of its shard of the step's global batch on the
parameters it last pulled, sends it to every PS rank (each gets its slice of the flat
vector) and receives the updated slices back. A PS rank applies every gradient the moment it
arrives with the configured optimizer, so fast workers never wait for slow ones and
gradients may be a few updates stale. `trainer.steps` counts updates per worker. The
protocol is in `_ps`, the roles (checkpoints, resume, final evaluation) in `_async`.
"""

from __future__ import annotations

import torch

from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.strategies._async import (
    WorkerSession,
    flat_params,
    load_flat,
    protocol_group,
    ps_layout,
    run_ps_rank,
)
from dtjob_trainer.strategies._ps import Kind, ShardServer, ShardState
from dtjob_trainer.strategies.common import shard_forward_backward

NAME = "ParameterServer/Async"


def run(ctx: RunContext) -> RunResult:
    """Serve a shard (PS ranks) or train against the servers (workers)."""
    lay = ps_layout(ctx)
    group = protocol_group(ctx)
    cfg = ctx.cfg.trainer
    model = ctx.build_model()
    name = ctx.strategy_name or NAME
    if ctx.rank >= lay.n_workers:

        def make_server(state: ShardState) -> ShardServer:
            return ShardServer(state, optimizer=build_optimizer([state.values], cfg.optimizer))

        return run_ps_rank(ctx, name, flat_params(model), make_server, group)

    model.to(ctx.device)
    session = WorkerSession(ctx, name, model, group)
    forward_backward = shard_forward_backward(ctx, model, ctx.rank, lay.n_workers)
    step = session.start()
    pushed = 0
    while step < cfg.steps and not ctx.stop.is_set():
        ctx.seed_step(step)
        model.zero_grad(set_to_none=True)
        # The shard loss comes divided by the worker count; this worker's loss is the mean.
        loss = forward_backward(step) * lay.n_workers
        grad = torch.cat([_grad(p).reshape(-1) for p in model.parameters()]).cpu()
        step += 1
        load_flat(model, session.client.exchange(Kind.GRADIENT, step, grad))
        pushed += 1
        session.progress.record(step, float(loss.item()))
    return session.finish(step, pushed)


def _grad(p: torch.nn.Parameter) -> torch.Tensor:
    return p.grad.detach() if p.grad is not None else torch.zeros_like(p)
