"""The two roles of the asynchronous parameter-server modes (Async, Hogwild across pods,
asynchronous EASGD), around the protocol of `_ps`.

Ranks follow the env contract: workers first (rank 0 = worker 0 reports progress and
evaluates), PS ranks last. No collective runs while training, so nobody waits for a slow
worker; there is one collective at the very end (totals of pushed and applied updates).

PS rank i holds shard i of the flat parameter vector and checkpoints it on its own, in
`<checkpoint dir>/ps-<i>/` (step = updates applied), every `checkpoint.everySteps` updates
per worker, at the end, and as soon as SIGTERM is seen. The checkpoint also holds the last
step of every worker, so restarted workers resume from there. Workers keep no state of
their own: they start from the parameters the PS ranks hold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.console import Console
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.data import epoch_of
from dtjob_trainer.errors import ConfigError, Preempted
from dtjob_trainer.evaluate import final_accuracy
from dtjob_trainer.strategies._ps import PSClient, ShardServer, ShardState, serve, shard_bounds

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PSLayout:
    """Worker and PS ranks of a ParameterServer job (contract order: workers first)."""

    n_workers: int
    n_ps: int

    @property
    def workers(self) -> range:
        """Ranks of the workers."""
        return range(self.n_workers)

    @property
    def ps_ranks(self) -> range:
        """Ranks of the parameter servers."""
        return range(self.n_workers, self.n_workers + self.n_ps)


def ps_layout(ctx: RunContext) -> PSLayout:
    """The job's layout, checked against the world size."""
    lay = PSLayout(ctx.cfg.role_processes("worker"), ctx.cfg.role_processes("ps"))
    if lay.n_workers + lay.n_ps != ctx.world_size:
        raise ConfigError(
            f"roles: {lay.n_workers} worker and {lay.n_ps} ps processes, but WORLD_SIZE is "
            f"{ctx.world_size}"
        )
    return lay


def protocol_group(ctx: RunContext) -> dist.ProcessGroup | None:
    """The group the protocol runs over (collective: every rank calls it). NCCL cannot
    receive from any source, so with NCCL the protocol gets a gloo group of its own."""
    return None if ctx.backend == "gloo" else dist.new_group(backend="gloo")


def flat_params(model: nn.Module) -> torch.Tensor:
    """The model's parameters as one flat CPU vector (a copy)."""
    return parameters_to_vector(model.parameters()).detach().cpu().clone()


def load_flat(model: nn.Module, flat: torch.Tensor) -> None:
    """Overwrite the model's parameters with a flat vector."""
    with torch.no_grad():
        device = next(model.parameters()).device
        vector_to_parameters(flat.to(device), model.parameters())


def _totals(
    ctx: RunContext, pushed: int, applied: int, group: dist.ProcessGroup | None
) -> tuple[int, int]:
    box = torch.tensor([pushed, applied], dtype=torch.float64)
    dist.all_reduce(box, group=group)
    return int(box[0].item()), int(box[1].item())


def totals_message(pushed: int, applied: int) -> str:
    """The result line that says whether every pushed update was applied."""
    return f"parameter servers applied {applied} of {pushed} pushed updates"


def run_ps_rank(
    ctx: RunContext,
    name: str,
    initial: torch.Tensor,
    make_server: Callable[[ShardState], ShardServer],
    group: dist.ProcessGroup | None,
) -> RunResult:
    """Serve this PS rank's shard of `initial` (the flat initial parameters) until every
    worker is done; checkpoint it; take part in the final totals."""
    lay = ps_layout(ctx)
    index = ctx.rank - lay.n_workers
    start, end = shard_bounds(initial.numel(), lay.n_ps)[index]
    state = ShardState(nn.Parameter(initial[start:end].clone()))
    server = make_server(state)
    checkpoints = Checkpointer(
        Path(ctx.env.checkpoint_dir) / f"ps-{index}", ctx.cfg.checkpoint.keep
    )
    restored = _restore_shard(checkpoints, server, (start, end, initial.numel()))
    every = ctx.cfg.checkpoint.everySteps * lay.n_workers
    saved_at: tuple[int, dict[int, int]] | None = None
    saved_on_stop = False

    def save() -> None:
        nonlocal saved_at
        # STOP requests change the workers' steps without applying an update: the final
        # save must still record them, or restarted workers would redo their last steps.
        if saved_at == (state.applied, state.worker_steps):
            return
        payload: dict[str, Any] = {
            "shard": state.values.detach().clone(),
            "bounds": (start, end, initial.numel()),
            "optimizer": server.optimizer.state_dict() if server.optimizer else None,
            "applied": state.applied,
            "worker_steps": dict(state.worker_steps),
        }
        checkpoints.save(state.applied, name, ctx.world_size, payload)
        saved_at = (state.applied, dict(state.worker_steps))

    def after_update(st: ShardState) -> None:
        nonlocal saved_on_stop
        if st.applied % every == 0:
            save()
        elif ctx.stop.is_set() and not saved_on_stop:
            # The pod may be killed before the workers stop: save now, once.
            save()
            saved_on_stop = True

    serve(server, lay.workers, final_to=0, after_update=after_update, group=group)
    save()
    _totals(ctx, 0, state.applied - restored, group)
    if ctx.stop.is_set():
        raise Preempted(f"PS rank {index}: stopped by SIGTERM; shard checkpoint written")
    steps = max(state.worker_steps.values(), default=0)
    return RunResult(strategy=name, steps=steps, message=f"PS shard {index} done")


def _restore_shard(
    checkpoints: Checkpointer, server: ShardServer, bounds: tuple[int, int, int]
) -> int:
    """Load the shard's latest checkpoint, if any; returns the updates it had applied."""
    ckpt = checkpoints.load_latest()
    if ckpt is None:
        return 0
    saved = ckpt.full_state("a parameter server")
    if tuple(saved["bounds"]) != bounds:
        raise ConfigError(
            f"roles.ps: the checkpoint in {checkpoints.directory} holds parameters "
            f"{tuple(saved['bounds'])} (start, end, total), this job's shard is {bounds}; keep "
            f"the PS count and model of the checkpoint or start afresh"
        )
    st = server.state
    with torch.no_grad():
        st.values.copy_(saved["shard"])
    st.applied = int(saved["applied"])
    st.worker_steps = {int(k): int(v) for k, v in saved["worker_steps"].items()}
    if server.optimizer is not None and saved["optimizer"] is not None:
        server.optimizer.load_state_dict(saved["optimizer"])
    log.info("PS shard restored from the checkpoint of %d applied updates", st.applied)
    return st.applied


class ProgressLog:
    """Rank 0's progress for the asynchronous modes: records losses, logs an interval line
    and reports progress every logEverySteps (or when forced); silent on other ranks."""

    def __init__(self, ctx: RunContext, samples_per_step: int, start: int = 0) -> None:
        self.ctx = ctx
        self.samples_per_step = samples_per_step
        self.console = Console(enabled=ctx.rank == 0)
        self.losses: list[float] = []
        self._mark = (start, time.perf_counter())

    def restart(self, step: int) -> None:
        """Measure throughput from `step` on, and cut the loss history back to it (after a
        resume)."""
        self._mark = (step, time.perf_counter())
        self.ctx.history.resume(step)

    def record(self, step: int, loss: float | None, force: bool = False) -> None:
        """Record the loss of `step` (every worker beats its heartbeat); on rank 0, log when
        the step is a log step or `force`."""
        self.ctx.heartbeat.beat(step)
        if self.ctx.rank != 0:
            return
        cfg = self.ctx.cfg.trainer
        if loss is not None:
            self.losses.append(loss)
        if not force and step % cfg.logEverySteps and step != cfg.steps:
            return
        last_step, last_time = self._mark
        now = time.perf_counter()
        self._mark = (step, now)
        rate = eta = None
        if step > last_step and now > last_time:
            rate = (step - last_step) * self.samples_per_step / (now - last_time)
            eta = (now - last_time) / (step - last_step) * (cfg.steps - step)
        epoch = epoch_of(max(step - 1, 0), cfg.batchSize, self.ctx.data.train_size)
        self.console.interval(step, cfg.steps, epoch, loss, rate, eta, final=step == cfg.steps)
        self.ctx.reporter.update(
            step=step,
            totalSteps=cfg.steps,
            epoch=epoch,
            loss=loss,
            samplesPerSecond=rate,
            etaSeconds=eta,
        )
        self.ctx.history.record(step, loss, rate, cfg.optimizer.lr)

    def finish(self, name: str, step: int, result: RunResult) -> None:
        """Rank 0: the closing line and the final progress report."""
        if self.ctx.rank != 0:
            return
        self.console.message(
            f"finished {step} steps with {name}: loss {result.final_loss} "
            f"held-out accuracy {result.accuracy}; {result.message}"
        )
        self.ctx.reporter.update(
            force=True,
            step=step,
            accuracy=result.accuracy,
            etaSeconds=0.0,
            message=result.message or None,
        )
        self.ctx.history.finish(step, result.accuracy)


class WorkerSession:
    """A worker's life in an asynchronous mode: start from the servers' parameters, report
    progress (rank 0), stop, and on rank 0 evaluate the final parameters."""

    def __init__(
        self,
        ctx: RunContext,
        name: str,
        model: nn.Module,
        group: dist.ProcessGroup | None,
        samples_per_step: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.name = name
        self.model = model
        self.group = group
        lay = ps_layout(ctx)
        numel = sum(p.numel() for p in model.parameters())
        self.client = PSClient(lay.ps_ranks, numel, ctx.dtype, group)
        self.progress = ProgressLog(ctx, samples_per_step or ctx.cfg.trainer.batchSize)
        self.start_step = 0

    def start(self) -> int:
        """Pull the parameters into the model; return the step to resume from."""
        flat, step = self.client.pull()
        load_flat(self.model, flat)
        self.start_step = step
        self.progress.restart(step)
        return step

    def finish(self, step: int, pushed: int) -> RunResult:
        """Tell the servers this worker is done; rank 0 evaluates the final parameters.
        `pushed` counts this worker's parameter-changing requests (each went to every PS
        rank)."""
        self.client.stop(step)
        result = RunResult(strategy=self.name, steps=step, start_step=self.start_step)
        if self.ctx.rank == 0:
            flat, _ = self.client.final()
            load_flat(self.model, flat)
            finish_result(self.ctx, self.model, result, self.progress.losses)
        # Every request goes to each PS rank, which counts it once.
        all_pushed, applied = _totals(self.ctx, pushed * len(self.client.ps_ranks), 0, self.group)
        result.message = totals_message(all_pushed, applied)
        if self.ctx.stop.is_set():
            raise Preempted(f"worker rank {self.ctx.rank}: stopped by SIGTERM after step {step}")
        self.progress.finish(self.name, step, result)
        return result


def finish_result(
    ctx: RunContext, model: nn.Module, result: RunResult, losses: list[float]
) -> None:
    """Fill rank 0's result: losses, held-out accuracy and parameters of `model`."""
    result.losses = list(losses)
    result.final_loss = losses[-1] if losses else None
    result.accuracy = final_accuracy(model, ctx)
    result.params = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
