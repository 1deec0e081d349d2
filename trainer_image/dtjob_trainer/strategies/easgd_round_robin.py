"""ParameterServer, mode EASGDRoundRobin: elastic averaging with the workers taking turns at
the centre (Algorithm 1 of the multi-GPU EASGD lecture notes).

The centre W_bar lives with the master, the job's one ps process. At Algorithm 1's step t,
worker j = t mod G (G worker processes) pulls the centre, computes the gradient of its batch
and both sides move by the elastic rule, from the values before the step:

    W_j   <- W_j - eta * (grad_j + rho * (W_j - W_bar))
    W_bar <- W_bar + eta * rho * (W_j - W_bar)

with eta = trainer.optimizer.lr, rho = parameterServer.rho and alpha = eta * rho as in
easgd.py (the gradient part is the configured optimizer's step, exactly eta * grad_j for plain
SGD). One step of the shared loop is one round: t = s * G + j for j = 0 .. G-1, worker j
training on its shard j of global batch s, so `trainer.steps` counts steps per worker as in
the other parameter-server modes. With tau > 1 the workers exchange on rounds s % tau == 0
only and take plain local steps in between (Algorithm 1 is tau = 1).

Why the master serves in order rather than first come first served (asynchronous EASGD):
W_j only changes on worker j's own turns, so every worker computes its gradient while the
others are at the centre, and only the exchanges are serialised. The master receives from
worker t mod G by name (`dist.recv(src=j)`), so the order is the schedule's whatever order
the workers arrive in, and a run is deterministic: a resumed run equals an uninterrupted one.
That is also why it runs in the shared synchronous loop, whose checkpoint holds the centre,
every worker's W_j and optimizer state, and the turns applied (the asynchronous modes'
per-shard checkpoints restart workers from the centre).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.dist import broadcast_object, host_copy
from dtjob_trainer.evaluate import final_accuracy
from dtjob_trainer.loop import Trainable, run_loop
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.strategies._async import flat_params, load_flat, protocol_group
from dtjob_trainer.strategies.easgd import (
    CentreExchange,
    easgd_step,
    elastic_alpha,
    local_sgd_step,
)

NAME = "ParameterServer/EASGDRoundRobin"


class RoundRobinCentre:
    """The master's centre: applies one elastic exchange per worker per round, in turn."""

    def __init__(
        self,
        initial: torch.Tensor,
        alpha: float,
        workers: int,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        self.values = initial.detach().cpu().clone()
        self.alpha = alpha
        self.workers = workers
        self.group = group
        self.turns = 0
        """Exchanges applied so far: the next one is worker turns mod G."""
        self.order: list[int] = []
        """Worker ranks in the order their exchanges were applied (this process's run)."""

    def serve_round(self) -> None:
        """One exchange with each worker, worker 0 first: receive W_j, reply the centre from
        before the move, move the centre by alpha * (W_j - W_bar)."""
        incoming = torch.empty_like(self.values)
        for j in range(self.workers):
            assert self.turns % self.workers == j, "a round starts with worker 0"
            dist.recv(incoming, src=j, group=self.group)
            before = self.values.clone()
            self.values.add_(incoming - before, alpha=self.alpha)
            dist.send(before, dst=j, group=self.group)
            self.turns += 1
            self.order.append(j)


def master_exchange(master: int, group: dist.ProcessGroup | None) -> CentreExchange:
    """A worker's side of its turn: send W_j to the master, get the centre it saw."""

    def exchange(w: torch.Tensor, step: int) -> torch.Tensor:
        mine = w.detach().cpu().contiguous()
        dist.send(mine, dst=master, group=group)
        centre = torch.empty_like(mine)
        dist.recv(centre, src=master, group=group)
        return centre

    return exchange


def run(ctx: RunContext) -> RunResult:
    """Round-robin EASGD: workers 0 .. G-1, the master (the one ps process) last."""
    n = ctx.cfg.role_processes("worker")
    master = n
    is_master = ctx.rank == master
    tau = ctx.cfg.parameter_server.tau
    alpha = elastic_alpha(ctx)
    group = protocol_group(ctx)
    model = ctx.build_model().to(ctx.device)
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    evaluation_model = ctx.build_model().to(ctx.device)
    centre = RoundRobinCentre(flat_params(model), alpha, n, group) if is_master else None
    optimizer = None if is_master else build_optimizer(params, ctx.cfg.trainer.optimizer)
    exchange = master_exchange(master, group)
    # The loss share is loss / G: the loop's sum over ranks is the workers' mean loss.
    gradient_step = (
        None if optimizer is None else local_sgd_step(ctx, model, optimizer, ctx.rank, n)
    )

    def step(s: int) -> torch.Tensor:
        if centre is not None:
            if s % tau == 0:
                centre.serve_round()
            return torch.zeros((), dtype=ctx.dtype, device=ctx.device)
        assert gradient_step is not None
        return easgd_step(s, params, tau, alpha, exchange, gradient_step)

    def state_dict() -> dict[str, Any] | None:
        if centre is not None:
            mine: dict[str, Any] = {"centre": centre.values.clone(), "turns": centre.turns}
        else:
            assert optimizer is not None
            mine = {
                "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                "optimizer": host_copy(optimizer.state_dict()),
            }
        everyone: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
        dist.gather_object(mine, everyone, dst=0)
        if everyone is None:
            return None
        load_flat(evaluation_model, everyone[master]["centre"])
        return {
            "model": {
                k: v.detach().cpu().clone() for k, v in evaluation_model.state_dict().items()
            },
            "workers": everyone[:master],
            "turns": everyone[master]["turns"],
        }

    def load_state_dict(state: dict[str, Any] | None) -> None:
        state = broadcast_object(state)
        assert state is not None
        evaluation_model.load_state_dict(state["model"])
        start = flat_params(evaluation_model).to(ctx.dtype)
        if centre is not None:
            centre.values = start
            centre.turns = int(state.get("turns", 0))
            return
        assert optimizer is not None
        workers = state.get("workers") or []
        if len(workers) == n and "model" in workers[ctx.rank]:
            model.load_state_dict(workers[ctx.rank]["model"])
            optimizer.load_state_dict(workers[ctx.rank]["optimizer"])
        else:  # another worker count or another strategy's checkpoint: start at the centre
            load_flat(model, start)

    def evaluate() -> float | None:
        values = centre.values if centre is not None else torch.empty(numel, dtype=ctx.dtype)
        dist.broadcast(values, src=master, group=group)
        if ctx.rank != 0:
            return None
        load_flat(evaluation_model, values)
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
