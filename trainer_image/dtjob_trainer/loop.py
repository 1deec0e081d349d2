"""The synchronous training loop shared by the strategies.

A strategy describes itself with a `Trainable` and calls `run_loop(ctx, trainable)`, which:

1. resumes: rank 0 finds the latest checkpoint, the start step is broadcast over
   `sync_group`; a full checkpoint is restored by `load_state_dict` (a collective of the
   strategy) from rank 0, a sharded one by every rank reading its shards (`sharded`);
2. runs `step(s)` for s = start .. steps-1 after seeding the RNGs from (seed, s, rank);
3. every `sync_every` steps (and at checkpoint steps and the end) all-reduces, in ONE
   collective over `sync_group`, the pending per-step losses and a stop flag. `step(s)`
   returns this rank's share of the loss: the sum over `sync_group` is the global loss
   (data-parallel ranks return loss / dp_size, ranks without a loss return 0);
4. logs an interval line, reports progress and records a point of the loss history
   (`ctx.history`, cut back to the start step on resume) every `logEverySteps`;
5. checkpoints every `checkpoint.everySteps`, at the end, and when any rank saw SIGTERM
   (then raises `Preempted`, exit 143): `state_dict()` is a collective returning the full
   state on rank 0, which must contain "model" (full parameters by name), and rank 0
   writes it from a host copy in the background (`async_full`); a strategy with
   `save_sharded` writes a sharded checkpoint instead, every rank its own shards, in the
   background (`async_checkpoint`). Either way training goes on while a checkpoint is
   written, and the checkpoint of the end or of SIGTERM is waited for, so it is committed
   before the process exits;
6. evaluates held-out accuracy (`evaluate()`, a collective, result on rank 0).

Every rank beats its heartbeat (`ctx.heartbeat`) after each step, and marks its checkpoint
reads and writes and its evaluation as such, so that those pauses are not taken for a stall.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from dtjob_trainer.async_full import FullSaver, live_storages
from dtjob_trainer.checkpoint import sharded_refusal
from dtjob_trainer.console import Console
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.data import epoch_of
from dtjob_trainer.dist import broadcast_object
from dtjob_trainer.errors import ConfigError, Preempted, ReplicaMismatch, TrainerError
from dtjob_trainer.fault import step_fault
from dtjob_trainer.heartbeat import CHECKPOINTING, EVALUATING
from dtjob_trainer.progress import utc_now

# torch.distributed.checkpoint (DCP), which sharded checkpoints are written and read with, is
# imported where they are: it costs a trainer process about a second of CPU at start-up
# (DTensor, sympy), and the parameter-server strategies never use it.
if TYPE_CHECKING:
    from dtjob_trainer.async_checkpoint import AsyncSaver
    from dtjob_trainer.sharded import ShardedState

# Upper bound on steps between stop-flag checks: SIGTERM is honoured within this many
# steps even when the log interval is long, while one small collective per 10 steps costs
# next to nothing.
MAX_SYNC_EVERY = 10

log = logging.getLogger(__name__)


@dataclass
class Trainable:
    """A strategy's training state and operations, as the loop needs them."""

    name: str
    step: Callable[[int], torch.Tensor]
    """Run the optimizer step of global step s; return this rank's share of its loss."""
    state_dict: Callable[[], dict[str, Any] | None]
    """Collective: the full training state on rank 0 (with key "model"), None elsewhere."""
    load_state_dict: Callable[[dict[str, Any] | None], None]
    """Collective: restore from the state given on rank 0 (None on the other ranks)."""
    evaluate: Callable[[], float | None]
    """Collective: held-out accuracy on rank 0, None elsewhere."""
    samples_per_step: int
    """Samples of one global step (for samples/s)."""
    replica: Callable[[], torch.Tensor] | None = None
    """This rank's replicated parameters as one flat vector (for --verify-replicas)."""
    verify_group: dist.ProcessGroup | None = None
    """Ranks whose `replica()` must be identical (None: all ranks)."""
    sync_group: dist.ProcessGroup | None = None
    """Ranks running this loop in lock-step (None: all ranks). Must contain rank 0."""
    sharded: ShardedState | None = None
    """The model and optimizer as torch.distributed.checkpoint reads them: lets the
    strategy resume from sharded checkpoints (whatever process count wrote them)."""
    save_sharded: bool = False
    """Write sharded checkpoints (every rank its shards) instead of full ones."""


@dataclass
class _Meter:
    """Throughput over the last interval."""

    step: int
    time: float

    def rate(self, step: int, samples_per_step: int) -> tuple[float | None, float | None]:
        now = time.perf_counter()
        elapsed, steps = now - self.time, step - self.step
        self.step, self.time = step, now
        if steps <= 0 or elapsed <= 0:
            return None, None
        return steps * samples_per_step / elapsed, elapsed / steps


def _sync(
    ctx: RunContext, pending: list[torch.Tensor], group: dist.ProcessGroup | None
) -> tuple[list[float], bool]:
    """All-reduce pending loss shares and the stop flag in one collective."""
    flag = torch.tensor([1.0 if ctx.stop.is_set() else 0.0], dtype=torch.float64)
    # Stacked where the losses live: one device-to-host copy per sync, not one per step.
    values = torch.stack([p.detach().reshape(()) for p in pending]).to(torch.float64)
    buf = torch.cat([values.to(ctx.wire), flag.to(ctx.wire)])
    dist.all_reduce(buf, group=group)
    out = buf.cpu().tolist()
    return out[:-1], out[-1] > 0


def _verify(ctx: RunContext, t: Trainable, step: int) -> None:
    assert t.replica is not None
    mine = t.replica().to(ctx.wire)
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size(t.verify_group))]
    dist.all_gather(gathered, mine, group=t.verify_group)
    for i, other in enumerate(gathered):
        if not torch.equal(other, gathered[0]):
            diff = (other - gathered[0]).abs().max().item()
            raise ReplicaMismatch(
                f"after step {step}: parameters of group member {i} differ from member 0 "
                f"(max abs difference {diff:g})"
            )


def _resume(ctx: RunContext, t: Trainable) -> int:
    ckpt = ctx.checkpoints.load_latest() if ctx.rank == 0 else None
    found = ckpt and (ckpt.step, ckpt.path.name if ckpt.sharded and ckpt.path else None)
    found = broadcast_object(found, group=t.sync_group)
    if not found:
        return 0
    step, sharded_name = found
    if ckpt is not None:
        log.info(
            "resuming from the checkpoint of step %d (strategy %s, %d processes)",
            ckpt.step,
            ckpt.strategy,
            ckpt.world_size,
        )
    if sharded_name is None:
        t.load_state_dict(ckpt.state if ckpt else None)
        return int(step)
    if t.sharded is None:
        raise ConfigError(sharded_refusal(sharded_name, t.name))
    from torch.distributed.checkpoint.api import CheckpointException

    from dtjob_trainer.sharded import load_sharded

    try:
        load_sharded(t.sharded, ctx.checkpoints.directory / sharded_name, t.sync_group)
    except CheckpointException as exc:
        # Rank 0 found every shard file whole before the read, and DCP reads straight into
        # the live parameters: a failure now leaves them half-restored, so no fallback.
        # DCP raises on every rank alike (it gathers the ranks' outcomes).
        raise TrainerError(
            f"could not read the sharded checkpoint {sharded_name} in "
            f"{ctx.checkpoints.directory}: {str(exc).splitlines()[0]}; move it away to resume "
            "from the one before"
        ) from exc
    return int(step)


def run_loop(ctx: RunContext, t: Trainable) -> RunResult:
    """Train `t` from the latest checkpoint to trainer.steps; see the module docstring."""
    cfg = ctx.cfg.trainer
    total, log_every, ckpt_every = cfg.steps, cfg.logEverySteps, ctx.cfg.checkpoint.everySteps
    sync_every = min(log_every, MAX_SYNC_EVERY)
    console = Console(enabled=ctx.rank == 0)
    n_train = ctx.data.train_size
    verify = ctx.options.verify_replicas and t.replica is not None

    with ctx.heartbeat.doing(CHECKPOINTING):
        start = _resume(ctx, t)
    ctx.heartbeat.beat(start)
    fault = step_fault(ctx.env.faults, ctx.rank)  # tests only; None otherwise
    saver = None
    if t.save_sharded:
        assert t.sharded is not None, "save_sharded needs the sharded state"
        from dtjob_trainer.async_checkpoint import AsyncSaver

        saver = AsyncSaver(
            ctx.checkpoints,
            t.sharded,
            t.name,
            ctx.rank,
            ctx.world_size,
            t.sync_group,
            on_commit=lambda step: _committed(ctx, step),
        )
    full = None
    if saver is None and ctx.rank == 0:  # full checkpoints: rank 0 writes them alone
        full = FullSaver(
            ctx.checkpoints, t.name, ctx.world_size, on_commit=lambda step: _committed(ctx, step)
        )
    ctx.history.resume(start)
    lr = ctx.cfg.trainer.optimizer.lr  # constant: the trainer has no LR schedule
    result = RunResult(strategy=t.name, steps=start, start_step=start)
    meter = _Meter(start, time.perf_counter())
    last_ckpt: int | None = start if start > 0 else None
    state: dict[str, Any] | None = None
    pending: list[torch.Tensor] = []
    step = start
    ctx.reporter.update(step=step, totalSteps=total, epoch=epoch_of(step, cfg.batchSize, n_train))

    timer, cpu_timer = time.perf_counter(), time.process_time()
    while step < total:
        if fault is not None:
            fault(step)
        ctx.seed_step(step)
        pending.append(t.step(step))
        step += 1
        ctx.heartbeat.beat(step)
        if verify:
            _verify(ctx, t, step)
            result.replicas_checked += 1
        due_ckpt = step % ckpt_every == 0 or step == total
        if step % sync_every and not due_ckpt:
            continue
        losses, stop = _sync(ctx, pending, t.sync_group)
        pending = []
        result.losses += losses
        result.steps = step
        if step % log_every == 0 or step == total or stop:
            rate, step_time = meter.rate(step, t.samples_per_step)
            eta = None if step_time is None else step_time * (total - step)
            epoch = epoch_of(step - 1, cfg.batchSize, n_train)
            console.interval(step, total, epoch, losses[-1], rate, eta, final=step == total)
            ctx.reporter.update(
                step=step, epoch=epoch, loss=losses[-1], samplesPerSecond=rate, etaSeconds=eta
            )
            ctx.history.record(step, losses[-1], rate, lr)
        if due_ckpt or stop:
            result.train_seconds += time.perf_counter() - timer
            result.train_cpu_seconds += time.process_time() - cpu_timer
            try:
                with ctx.heartbeat.doing(CHECKPOINTING):
                    state, written = _checkpoint(
                        ctx, t, saver, full, step, final=stop or step == total
                    )
            except TrainerError as exc:
                if not stop:
                    raise
                # Still a preemption (exit 143, a restart that does not count as a failure):
                # the previous checkpoint stays `latest` and the restart resumes from it.
                raise Preempted(f"stopped by SIGTERM after step {step}; {exc}") from exc
            timer, cpu_timer = time.perf_counter(), time.process_time()
            last_ckpt = step
            if written:
                ctx.reporter.update(
                    force=True, lastCheckpointStep=last_ckpt, lastCheckpointTime=utc_now()
                )
        if stop:
            raise Preempted(f"stopped by SIGTERM after step {step}; checkpoint written")

    if ctx.device.type == "cuda":
        result.peak_device_bytes = int(torch.cuda.max_memory_allocated(ctx.device))
    result.final_loss = result.losses[-1] if result.losses else None
    with ctx.heartbeat.doing(EVALUATING):
        result.accuracy = t.evaluate()
    with ctx.heartbeat.doing(CHECKPOINTING):
        if t.save_sharded:
            # Nothing was gathered: the full parameters are gathered for the result file
            # only (the option is the same on every rank, so all join the collective or none).
            if ctx.options.result_file:
                state = t.state_dict()
        elif last_ckpt != step or step == start:  # the final state has not been gathered yet
            state = t.state_dict()
    if ctx.rank == 0:
        result.params = state["model"] if state is not None else None
        console.message(
            f"finished {step} steps with {t.name}: loss {result.final_loss} "
            f"held-out accuracy {result.accuracy}"
        )
        ctx.reporter.update(force=True, step=step, accuracy=result.accuracy, etaSeconds=0.0)
        ctx.history.finish(step, result.accuracy)
    return result


def _committed(ctx: RunContext, step: int) -> None:
    """A background save of `step` was committed (rank 0, on the saver's thread; the
    reporter is thread-safe): progress says it at once."""
    ctx.reporter.update(force=True, lastCheckpointStep=step, lastCheckpointTime=utc_now())


def _checkpoint(
    ctx: RunContext,
    t: Trainable,
    saver: AsyncSaver | None,
    full: FullSaver | None,
    step: int,
    final: bool,
) -> tuple[dict[str, Any] | None, bool]:
    """The full state if one was gathered, and whether (on rank 0) a checkpoint of `step`
    is kept now. A save runs in the background, sharded (every rank, `AsyncSaver`) or full
    (rank 0, `FullSaver`), and is reported once committed (`_committed`), except the final
    one (end of training, SIGTERM): that one is waited for, so the process never exits
    before its last checkpoint is whole."""
    if saver is not None:
        if not final:
            saver.start(step)
            return None, False
        outcome = saver.finish(step)
        return None, outcome.kind == "committed" and ctx.rank == 0
    state = t.state_dict()
    if ctx.rank != 0:
        return state, False
    assert state is not None, "state_dict() must return the state on rank 0"
    assert full is not None, "rank 0 of a loop with full checkpoints has a FullSaver"
    if final:
        full.finish(step, state)
        return state, True
    # The host copy the background write uses: the gathered state may share its tensors
    # with the live model and optimizer, which the next step changes. Where the strategy
    # says what they are, only what shares them is copied.
    live = None
    if t.sharded is not None:
        live = live_storages(t.sharded.model, t.sharded.optimizer)
    return full.start(step, state, live), False
