"""ParameterServer, mode Hogwild (Niu, Recht, Re and Wright 2011): lock-free updates to
shared parameters.

Inside a pod, each worker rank puts its model in shared memory (`share_memory()`) and
starts `parameterServer.hogwildProcesses` processes (torch.multiprocessing, started as
`hogwild_context` says); each runs its own optimizer on the same parameter storage, with no
lock, on its own shard of every global batch (process j of worker w takes shard w * K + j
of the w * K pieces). `trainer.steps` counts updates per Hogwild process. These processes
are not ranks of the job: the pod's rank supervises them.

Across pods it is the asynchronous parameter server: the pod's rank pushes what its
processes changed since the last exchange (a DELTA request: the PS ranks add it) about once
per round of K updates, and adopts the servers' parameters plus whatever its processes have
changed meanwhile, all without stopping them. With a single worker rank no ps role is
needed; the rank then checkpoints the shared parameters itself.
"""

from __future__ import annotations

import glob
import logging
import os
import time
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.synchronize import Event

import torch
import torch.multiprocessing as mp
from torch import nn

from dtjob_api.spec import OptimizerSpec
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.data import global_batch_indices, shard
from dtjob_trainer.errors import Preempted, TrainerError
from dtjob_trainer.models import loss_fn
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.strategies._async import (
    ProgressLog,
    WorkerSession,
    finish_result,
    flat_params,
    protocol_group,
    ps_layout,
    run_ps_rank,
)
from dtjob_trainer.strategies._ps import Kind, PSClient, ShardServer, ShardState

NAME = "ParameterServer/Hogwild"
# The supervising rank wakes up this often to sync, report and watch for SIGTERM.
POLL_SECONDS = 0.01

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HogwildTask:
    """What one Hogwild process does (picklable: it crosses the process boundary)."""

    index: int
    """Slot of this process in the pod's shared counters."""
    part: int
    parts: int
    """Shard `part` of `parts` of every global batch."""
    start: int
    steps: int
    batch_size: int
    seed: int
    optimizer: OptimizerSpec


@dataclass(frozen=True)
class StopAlignment:
    """Shared by a pod's processes and its rank, so that a stopped pod's processes all stop
    at the same step. The pod checkpoints (or its PS ranks record) ONE step per pod, from
    which every process resumes: a process stopped ahead of it would train its extra
    steps a second time after the restart, one stopped behind it would skip steps."""

    parked: torch.Tensor
    """int64 [K]: 1 once process j has seen the stop at a step boundary and waits."""
    stop_at: torch.Tensor
    """int64 [1]: -1 until the rank has seen every process parked (or exited), then the
    step every process stops at (the furthest one's)."""

    def park_or_stop(self, index: int, step: int, parent: int) -> bool:
        """At the boundary before `step`, after the stop: wait for the common stop step;
        True when this process has reached it."""
        self.parked[index] = 1
        while int(self.stop_at[0].item()) < 0:
            if os.getppid() != parent:
                return True
            time.sleep(POLL_SECONDS / 10)
        return step >= int(self.stop_at[0].item())


def hogwild_process(
    task: HogwildTask,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    counters: torch.Tensor,
    losses: torch.Tensor,
    stop: Event,
    align: StopAlignment | None = None,
) -> None:
    """Train the shared `model` in place, without locks, for steps start .. steps-1.

    `counters[index]` counts this process's updates and `losses[index]` holds its latest
    loss (both shared with the supervising rank). Once `stop` is set the process stops at
    its next step boundary, or with `align` at the step its rank picks for all of them."""
    torch.set_num_threads(1)  # K processes share the pod's cores
    optimizer = build_optimizer(model.parameters(), task.optimizer)
    n = x.shape[0]
    parent = os.getppid()
    for step in range(task.start, task.steps):
        # A supervising rank that died without setting `stop` (os._exit skips the clean-up
        # of daemon processes) must not leave its processes training on their own.
        if os.getppid() != parent:
            break
        if stop.is_set() and (align is None or align.park_or_stop(task.index, step, parent)):
            break
        idx = shard(
            global_batch_indices(step, task.batch_size, n, task.seed), task.part, task.parts
        )
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        torch.autograd.backward(loss)
        optimizer.step()
        counters[task.index] += 1
        losses[task.index] = loss.detach().to(losses.dtype)


def hogwild_context() -> SpawnContext | ForkServerContext:
    """How a pod's Hogwild processes start: where no GPU device node is visible, forked from
    a server that imported torch and this module once (`forked.start_server`), so a pod of
    K processes pays that import once instead of K times (about 6 CPU-s each: a spawned
    process is a new interpreter; in a two-pod CPU job, 26 of a launch's 44 CPU-s); with
    GPUs, spawned, as the launcher starts its processes there (forked.py). Either way a
    process is started clean, never forked from the rank with its threads and sockets."""
    from dtjob_trainer.launch import GPU_DEVICE_NODES

    if any(glob.glob(pattern) for pattern in GPU_DEVICE_NODES):
        return mp.get_context("spawn")
    from dtjob_trainer.forked import start_server

    return start_server([__name__])


def _shared(t: torch.Tensor) -> torch.Tensor:
    """`t` moved to shared memory (CUDA tensors are shared through CUDA IPC as they are)."""
    t.share_memory_()  # type: ignore[no-untyped-call]
    return t


class HogwildPod:
    """The pod's Hogwild processes and their shared state."""

    def __init__(
        self, ctx: RunContext, model: nn.Module, start: int, first_part: int, parts: int
    ) -> None:
        k = ctx.cfg.parameter_server.hogwildProcesses
        cfg = ctx.cfg.trainer
        self.model = model.share_memory()
        self.start = start
        self.counters = _shared(torch.zeros(k, dtype=torch.int64))
        self.losses = _shared(torch.full((k,), float("nan"), dtype=torch.float64))
        start_method = hogwild_context()
        self.stop_event = start_method.Event()
        self.align = StopAlignment(
            _shared(torch.zeros(k, dtype=torch.int64)),
            _shared(torch.full((1,), -1, dtype=torch.int64)),
        )
        data = ctx.data
        x = _shared(data.x_train.to(ctx.device))
        y = _shared(data.y_train.to(ctx.device))
        self.procs = [
            start_method.Process(
                target=hogwild_process,
                args=(
                    HogwildTask(
                        j,
                        first_part + j,
                        parts,
                        start,
                        cfg.steps,
                        cfg.batchSize,
                        cfg.seed,
                        cfg.optimizer,
                    ),
                    self.model,
                    x,
                    y,
                    self.counters,
                    self.losses,
                    self.stop_event,
                    self.align,
                ),
                daemon=True,
            )
            for j in range(k)
        ]

    def start_all(self) -> None:
        """Start the processes."""
        for p in self.procs:
            p.start()

    def request_stop(self) -> None:
        """Stop the processes at a common step: call until they have all stopped. Once
        every live process is parked at a step boundary (none can move on), the furthest
        one's step is where all of them stop; a finished process counts as at the end."""
        self.stop_event.set()
        if int(self.align.stop_at[0].item()) >= 0:
            return
        for j, p in enumerate(self.procs):
            if p.is_alive() and not int(self.align.parked[j].item()):
                return
        self.align.stop_at[0] = self.start + int(self.counters.max().item())

    def running(self) -> bool:
        """Some process is still training."""
        return any(p.is_alive() for p in self.procs)

    def updates(self) -> int:
        """Updates made by all processes since the start."""
        return int(self.counters.sum().item())

    def step(self) -> int:
        """The global step every process has passed (the slowest one's)."""
        return self.start + int(self.counters.min().item())

    def loss(self) -> float | None:
        """Mean of the processes' latest losses (None before the first)."""
        valid = self.losses[~torch.isnan(self.losses)]
        return float(valid.mean().item()) if valid.numel() else None

    def join(self) -> None:
        """Wait for every process; TrainerError when one failed."""
        for p in self.procs:
            p.join()
        failed = [p.exitcode for p in self.procs if p.exitcode != 0]
        if failed:
            raise TrainerError(f"a Hogwild process failed (exit codes {failed}); see its log")


def push_delta(client: PSClient, model: nn.Module, base: torch.Tensor, step: int) -> torch.Tensor:
    """Send what the pod changed since `base` (the servers' parameters at the last exchange)
    and adopt the servers' new parameters plus what changed during the exchange; returns
    the new base. The processes keep running: changes made meanwhile are kept, not lost."""
    sent = flat_params(model)
    reply = client.exchange(Kind.DELTA, step, sent - base)
    catch_up = reply - sent
    with torch.no_grad():
        offset = 0
        for p in model.parameters():
            p.add_(catch_up[offset : offset + p.numel()].view_as(p).to(p.device))
            offset += p.numel()
    return reply


def run(ctx: RunContext) -> RunResult:
    """Serve a shard (PS ranks) or run this pod's Hogwild processes (workers)."""
    lay = ps_layout(ctx)
    k = ctx.cfg.parameter_server.hogwildProcesses
    cfg = ctx.cfg.trainer
    parts = lay.n_workers * k
    name = ctx.strategy_name or NAME
    group = protocol_group(ctx) if lay.n_ps else None
    model = ctx.build_model()
    if ctx.rank >= lay.n_workers:

        def make_server(state: ShardState) -> ShardServer:
            return ShardServer(state)

        return run_ps_rank(ctx, name, flat_params(model), make_server, group)

    model.to(ctx.device)
    session: WorkerSession | None = None
    local: LocalCheckpoints | None = None
    if lay.n_ps:
        session = WorkerSession(ctx, name, model, group, cfg.batchSize)
        progress, start = session.progress, session.start()
    else:
        local = LocalCheckpoints(ctx, name, model)
        progress, start = ProgressLog(ctx, cfg.batchSize), local.resume()
    progress.restart(start)
    pod = HogwildPod(ctx, model, start, ctx.rank * k, parts)
    base = flat_params(model)
    pushed = synced_at = 0
    reported = start
    pod.start_all()
    while pod.running():
        time.sleep(POLL_SECONDS)
        if ctx.stop.is_set():
            pod.request_stop()
        if session and pod.updates() - synced_at >= k:
            synced_at = pod.updates()
            base = push_delta(session.client, model, base, pod.step())
            pushed += 1
        step = pod.step()
        if step // cfg.logEverySteps > reported // cfg.logEverySteps:
            progress.record(step, pod.loss(), force=True)
            reported = step
        if local:
            local.save_if_due(step)
    pod.join()
    step = pod.step()
    # Each process made step - start updates (the stop is aligned): the resume tests check
    # this line against the steps recorded.
    log.info(
        "Hogwild processes of rank %d made %d updates (steps %d to %d each)",
        ctx.rank,
        pod.updates(),
        start,
        step,
    )
    if session:
        push_delta(session.client, model, base, step)
        pushed += 1
        result = session.finish(step, pushed)
    else:
        assert local is not None
        local.save(step)
        result = RunResult(strategy=name, steps=step, start_step=start)
        finish_result(ctx, model, result, progress.losses)
        result.message = f"Hogwild processes made {pod.updates()} updates"
        if ctx.stop.is_set():
            raise Preempted(f"stopped by SIGTERM after step {step}; checkpoint written")
        progress.finish(name, step, result)
    return result


class LocalCheckpoints:
    """Checkpoints of a Hogwild job with a single worker rank and no PS ranks: the rank
    snapshots the shared parameters itself (the processes keep training meanwhile)."""

    def __init__(self, ctx: RunContext, name: str, model: nn.Module) -> None:
        self.ctx = ctx
        self.name = name
        self.model = model
        self.last = 0

    def resume(self) -> int:
        """Load the latest checkpoint into the model; return its step (0 without one)."""
        ckpt = self.ctx.checkpoints.load_latest()
        if ckpt is None:
            return 0
        self.model.load_state_dict(ckpt.full_state(self.name)["model"])
        log.info("resuming Hogwild from the checkpoint of step %d", ckpt.step)
        self.last = ckpt.step
        return ckpt.step

    def save_if_due(self, step: int) -> None:
        """Save when `step` has crossed a checkpoint.everySteps boundary."""
        every = self.ctx.cfg.checkpoint.everySteps
        if step // every > self.last // every:
            self.save(step)

    def save(self, step: int) -> None:
        """Save the parameters as the checkpoint of `step`."""
        if step == self.last and self.ctx.checkpoints.steps():
            return
        params = {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}
        self.ctx.checkpoints.save(step, self.name, self.ctx.world_size, {"model": params})
        self.last = step
