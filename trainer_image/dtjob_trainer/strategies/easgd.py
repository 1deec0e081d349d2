"""ParameterServer, mode EASGD (elastic averaging SGD, Zhang, Choromanska and LeCun 2015).

Every worker i trains its own parameters W_i on its shard of each global batch; a centre
W_bar ties them together. With eta = trainer.optimizer.lr, rho = parameterServer.rho and
alpha = eta * rho, every tau steps (steps s with s % tau == 0):

    W_i   <- W_i - eta * grad_i - alpha * (W_i - W_bar)
    W_bar <- W_bar + alpha * sum_i (W_i - W_bar)

and plain local steps W_i <- W_i - eta * grad_i otherwise (the gradient part is the
configured optimizer's step, exactly this for plain SGD). Both updates use the values from
before the step, the same alpha on both sides, so with zero gradients sum_i W_i + W_bar does
not change: the elastic force moves mass between workers and centre, never creates it.

Two forms, chosen by the roles:
- synchronous (no ps role): the centre is replicated on every worker and
  sum_i (W_i - W_bar) is one all-reduce every tau steps; the shared loop runs it.
- asynchronous (ps role): the PS ranks hold the centre (sharded); every tau steps a worker
  sends W_i (ELASTIC request), the PS rank moves its centre slice by alpha * (W_i - W_bar)
  and returns the centre from before the move, from which the worker takes its own elastic
  step. Workers never wait for each other.
The final model (evaluated, checkpointed as "model") is the centre.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.dist import broadcast_object, host_copy, via_wire
from dtjob_trainer.evaluate import final_accuracy
from dtjob_trainer.loop import Trainable, run_loop
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

NAME = "ParameterServer/EASGD"

CentreExchange = Callable[[torch.Tensor, int], torch.Tensor]
"""(W_i as a flat vector, step) -> the centre from before this exchange moved it."""


def elastic_alpha(ctx: RunContext) -> float:
    """alpha = eta * rho: the share of the worker-centre distance each side moves."""
    return ctx.cfg.trainer.optimizer.lr * ctx.cfg.parameter_server.rho


class ReplicatedCentre:
    """The synchronous form's centre: a copy on every worker, moved by one all-reduce."""

    def __init__(
        self,
        initial: torch.Tensor,
        alpha: float,
        group: dist.ProcessGroup | None = None,
        wire: torch.device | None = None,
    ) -> None:
        self.values = initial.detach().clone()
        self.alpha = alpha
        self.group = group
        self.wire = wire or self.values.device

    def exchange(self, w: torch.Tensor, step: int) -> torch.Tensor:
        """Collective over the workers: W_bar += alpha * sum_i (W_i - W_bar); returns the
        centre from before the move."""
        before = self.values.clone()
        total = w - before
        via_wire(total, self.wire, lambda t: dist.all_reduce(t, group=self.group))
        self.values.add_(total, alpha=self.alpha)
        return before


def easgd_step(
    step: int,
    params: list[nn.Parameter],
    tau: int,
    alpha: float,
    exchange: CentreExchange,
    gradient_step: Callable[[int], torch.Tensor],
) -> torch.Tensor:
    """One EASGD step of one worker: the elastic exchange every tau steps (with W_i from
    before the gradient step), then `gradient_step(step)` (forward, backward, optimizer
    step; returns the loss), then the worker's own elastic move."""
    diff = None
    if step % tau == 0:
        w = torch.cat([p.detach().reshape(-1) for p in params])
        diff = w - exchange(w, step).to(w.device)
    loss = gradient_step(step)
    if diff is not None:
        with torch.no_grad():
            offset = 0
            for p in params:
                p.sub_(diff[offset : offset + p.numel()].view_as(p), alpha=alpha)
                offset += p.numel()
    return loss


def run(ctx: RunContext) -> RunResult:
    """EASGD in its synchronous (no ps role) or asynchronous (ps role) form."""
    if ctx.cfg.role_processes("ps") == 0:
        return _run_sync(ctx)
    return _run_async(ctx)


def local_sgd_step(
    ctx: RunContext, model: nn.Module, optimizer: torch.optim.Optimizer, part: int, parts: int
) -> Callable[[int], torch.Tensor]:
    """A worker's own optimizer step on its shard (part of parts); every EASGD form, the
    round-robin one included, takes its local steps this way."""
    forward_backward = shard_forward_backward(ctx, model, part, parts)

    def gradient_step(step: int) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = forward_backward(step)
        optimizer.step()
        return loss

    return gradient_step


def _run_sync(ctx: RunContext) -> RunResult:
    n = ctx.world_size
    ps = ctx.cfg.parameter_server
    model = ctx.build_model().to(ctx.device)
    params = list(model.parameters())
    optimizer = build_optimizer(params, ctx.cfg.trainer.optimizer)
    centre = ReplicatedCentre(flat_params(model).to(ctx.device), elastic_alpha(ctx), wire=ctx.wire)
    # The loss share is loss / n: the loop's sum is the workers' mean loss.
    gradient_step = local_sgd_step(ctx, model, optimizer, ctx.rank, n)
    evaluation_model = ctx.build_model().to(ctx.device)

    def step(s: int) -> torch.Tensor:
        return easgd_step(s, params, ps.tau, centre.alpha, centre.exchange, gradient_step)

    def centre_state() -> dict[str, torch.Tensor]:
        load_flat(evaluation_model, centre.values)
        return {k: v.detach().cpu().clone() for k, v in evaluation_model.state_dict().items()}

    def state_dict() -> dict[str, Any] | None:
        mine = {
            "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
            "optimizer": host_copy(optimizer.state_dict()),
        }
        workers: list[Any] | None = [None] * n if ctx.rank == 0 else None
        dist.gather_object(mine, workers, dst=0)
        if workers is None:
            return None
        return {"model": centre_state(), "workers": workers}

    def load_state_dict(state: dict[str, Any] | None) -> None:
        state = broadcast_object(state)
        assert state is not None
        evaluation_model.load_state_dict(state["model"])
        centre.values = flat_params(evaluation_model).to(ctx.device, ctx.dtype)
        workers = state.get("workers") or []
        if len(workers) == n:
            model.load_state_dict(workers[ctx.rank]["model"])
            optimizer.load_state_dict(workers[ctx.rank]["optimizer"])
        else:  # another worker count (or another strategy's checkpoint): start at the centre
            load_flat(model, centre.values)

    def evaluate() -> float | None:
        if ctx.rank != 0:
            return None
        load_flat(evaluation_model, centre.values)
        return final_accuracy(evaluation_model, ctx)

    return run_loop(
        ctx,
        Trainable(
            name=ctx.strategy_name or NAME,
            step=step,
            state_dict=state_dict,
            load_state_dict=load_state_dict,
            evaluate=evaluate,
            samples_per_step=ctx.cfg.trainer.batchSize,
        ),
    )


def _run_async(ctx: RunContext) -> RunResult:
    lay = ps_layout(ctx)
    group = protocol_group(ctx)
    cfg = ctx.cfg.trainer
    ps = ctx.cfg.parameter_server
    alpha = elastic_alpha(ctx)
    model = ctx.build_model()
    name = ctx.strategy_name or NAME
    if ctx.rank >= lay.n_workers:

        def make_server(state: ShardState) -> ShardServer:
            return ShardServer(state, elastic_alpha=alpha)

        return run_ps_rank(ctx, name, flat_params(model), make_server, group)

    model.to(ctx.device)
    params = list(model.parameters())
    optimizer = build_optimizer(params, cfg.optimizer)
    session = WorkerSession(ctx, name, model, group)
    step = session.start()
    gradient_step = local_sgd_step(ctx, model, optimizer, ctx.rank, lay.n_workers)
    pushed = 0

    def exchange(w: torch.Tensor, s: int) -> torch.Tensor:
        nonlocal pushed
        pushed += 1
        # Recorded as s + 1: once the centre has moved, step s's exchange is done, and a
        # worker restarted at s (after a kill with no STOP) would move the centre twice.
        return session.client.exchange(Kind.ELASTIC, s + 1, w)

    while step < cfg.steps and not ctx.stop.is_set():
        ctx.seed_step(step)
        # The shard loss is divided by the worker count; scale back to this worker's loss.
        loss = easgd_step(step, params, ps.tau, alpha, exchange, gradient_step) * lay.n_workers
        step += 1
        session.progress.record(step, float(loss.item()))
    return session.finish(step, pushed)
