"""Asynchronous sharded checkpoints: training goes on while the shards are written.

`AsyncSaver.start(step)` copies each rank's shards of the model and optimizer to host
memory (DCP's staging: on a GPU the device memory is free again for training; on a CPU
run the copy is what keeps the next optimizer step from changing tensors being written),
then `torch.distributed.checkpoint.async_save` writes them from a background thread while
`start` returns to the training loop.

The commit protocol is `sharded.save_sharded`'s, moved off the training thread: rank 0's
future completes only after every rank reported its writes and rank 0 wrote the metadata,
and rank 0 then checks every shard file the metadata names and renames
`.step-N.partial/` to `step-N/` and points `latest` at it, in the future's done-callback,
so a checkpoint is committed as soon as it is whole, not one interval later.

Why the pieces are as they are:

- The background save's collectives run over a gloo group of their own (made once,
  collectively, by `checkpoint_group`): sharing the training group would interleave them
  with the training collectives in a different order on each rank (a hang or corrupted
  data), and NCCL groups cannot move host tensors at all.
- At most one save is in flight: `start` first waits for the previous one. Two would need
  two host copies of the shards (the reused staging buffers would be overwritten while
  being written), race for the background group, and let an older save's commit
  overwrite `latest` after a newer one's. Waiting is also what keeps the commit's
  rename from racing the next save of the same directory.
- `wait` is collective and only then tells every rank the outcome, over the checkpoint
  group (idle by then): a rank cannot observe another's view of the directory, and on
  per-pod volumes each rank must remove its own shards of a dropped save.
- A failed background write (DCP gathers every rank's outcome, so all ranks see it) is
  logged with its error and leaves the previous checkpoint as `latest`; training goes on
  and the next save tries again, but two failures in a row end the run (the storage is
  broken, not blipping), as does a failure of the final save (at SIGTERM the loop turns
  that into a preemption all the same).
- Staging copies into host buffers made once, page-locked off the training thread on a
  GPU (`HostStager`): see its docstring.
- Always on for the loop's sharded saves, with no spec field: what is written and when it
  counts as committed are those of a blocking save, so there is no numerics or safety
  trade-off for a user to choose, only host memory (one copy of a rank's shards).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed._state_dict_utils import (
    CompanionMismatch,
    _copy_state_dict,
    _create_cpu_state_dict,
)
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.staging import BlockingAsyncStager
from torch.distributed.checkpoint.state_dict_saver import async_save
from torch.distributed.checkpoint.storage import StorageWriter
from torch.distributed.tensor import DTensor

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.dist import COLLECTIVE_TIMEOUT, broadcast_object
from dtjob_trainer.errors import TrainerError
from dtjob_trainer.save_outcome import FailuresInARow, Outcome, error_line
from dtjob_trainer.sharded import ShardedState, drop_message, missing_files, prepare_staging

log = logging.getLogger(__name__)

Writer = Callable[[Path], StorageWriter]


def checkpoint_group(group: dist.ProcessGroup | None) -> dist.ProcessGroup:
    """Collective over `group` (None: every rank): a gloo group of the same ranks for the
    background saves alone. Only its members call it (local synchronisation), so a
    strategy whose loop runs on a subset of ranks can have one too."""
    ranks = dist.get_process_group_ranks(group) if group is not None else None
    made: dist.ProcessGroup | None = dist.new_group(
        ranks=ranks,
        backend="gloo",
        timeout=COLLECTIVE_TIMEOUT,
        use_local_synchronization=ranks is not None,
    )
    assert made is not None, "every rank of the loop is a member"
    return made


Allocate = Callable[[torch.Tensor], torch.Tensor]
"""A host buffer like a staged tensor: the pinned one the stager moves its buffers to."""


def pinned_like(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised page-locked host tensor of `t`'s shape and dtype."""
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True)


def default_allocate() -> Allocate | None:
    """Page-locked twins where there is a GPU to copy from; none on a CPU run."""
    return pinned_like if torch.cuda.is_available() else None


def _slots(obj: Any) -> list[tuple[Any, Any]]:
    """Where the host tensors of a staged state dict sit, as (container, key) pairs: a dict
    or list and its key, or a DTensor and None (its local tensor). Empty and zero-dimension
    tensors are left out (nothing to pin), as are ShardedTensors (not ours to restructure)."""
    found: list[tuple[Any, Any]] = []
    items: Any = ()
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    for key, value in items:
        if isinstance(value, DTensor):
            if value._local_tensor.dim() and value._local_tensor.numel():
                found.append((value, None))
        elif isinstance(value, torch.Tensor):
            if value.dim() and value.numel():
                found.append((obj, key))
        else:
            found.extend(_slots(value))
    return found


def _tensor_at(slot: tuple[Any, Any]) -> torch.Tensor:
    owner, key = slot
    tensor: torch.Tensor = owner._local_tensor if key is None else owner[key]
    return tensor


def _place(slot: tuple[Any, Any], tensor: torch.Tensor) -> None:
    owner, key = slot
    if key is None:
        owner._local_tensor = tensor
    else:
        owner[key] = tensor


class HostStager(BlockingAsyncStager):
    """Stages a state into host buffers made once and reused by every save.

    DCP's default stager allocates fresh host tensors for every save (for a CPU DTensor it
    even deep-copies it first, then copies again), which on CPU blocked the loop longer
    than a blocking save's whole write (`bench/async_checkpoint.py`). Reusing the buffers
    is safe because at most one save is in flight: the previous save has been written
    before the next one copies into them. The price: one host copy of the rank's shards is
    held for the rest of the run.

    With CUDA the buffers end up page-locked (faster device-to-host copies), but not on the
    training thread: page-locking is slow (7.9 s for 5.7 GiB on the H200 of
    `bench/gpu_claims.py`'s async section, a stall of the loop as long as a blocking save's
    whole write). The first save stages into ordinary host memory, and a thread of its own
    allocates the page-locked twins meanwhile; the next save waits for that thread (by then
    long done, a save interval later) and moves the buffers to the twins before copying.
    If page-locking fails (a container's locked-memory limit), the ordinary buffers stay,
    with a warning: slower copies, never a failed save. The cost: until the second save,
    a rank holds two host copies of its shards (the one being written and its twins), the
    peak that staging a DTensor state always reached for a moment (DCP copies it to the
    host once more before making the buffers).
    """

    def __init__(self, allocate: Allocate | None = None) -> None:
        super().__init__(cache_staged_state_dict=True)
        self.allocate = allocate if allocate is not None else default_allocate()
        self._twins: list[torch.Tensor] = []
        self._twin_error: BaseException | None = None
        self._twinning: threading.Thread | None = None
        self._twinned_for: Any = None  # the cache the twins were made for

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """Copy `state_dict` into the host buffers (made anew if its layout changed)."""
        self._adopt_twins()
        if self.state_dict_cache is not None:
            try:
                return _copy_state_dict(state_dict, self.state_dict_cache)
            except (CompanionMismatch, RuntimeError):
                self.state_dict_cache = None  # keys or shapes changed: new buffers
        self.state_dict_cache = _create_cpu_state_dict(state_dict)
        staged = _copy_state_dict(state_dict, self.state_dict_cache)
        if self.allocate is not None:
            self._make_twins(self.state_dict_cache)
        return staged

    def buffers(self) -> list[torch.Tensor]:
        """The host buffers saves are staged into (none before the first save)."""
        if self.state_dict_cache is None:
            return []
        return [_tensor_at(s) for s in _slots(self.state_dict_cache)]

    def _make_twins(self, cache: dict[str, Any]) -> None:
        """Allocate the page-locked twins of `cache`'s tensors on a thread of their own."""
        allocate, shapes = self.allocate, [_tensor_at(s) for s in _slots(cache)]
        assert allocate is not None
        self._twins, self._twin_error, self._twinned_for = [], None, cache

        def run() -> None:
            try:
                self._twins = [allocate(t) for t in shapes]
            except BaseException as exc:  # reported by the next stage; the save goes on
                self._twin_error = exc

        self._twinning = threading.Thread(target=run, name="dtjob-pin-host-buffers", daemon=True)
        self._twinning.start()

    def _adopt_twins(self) -> None:
        """Wait for the twins of the cache (if being made) and move its buffers to them."""
        thread, self._twinning = self._twinning, None
        if thread is None:
            return
        thread.join()
        twins, cache, self._twins, self._twinned_for = self._twins, self._twinned_for, [], None
        if self._twin_error is not None:
            log.warning(
                "the checkpoint's host buffers stay in ordinary memory (page-locking them "
                "failed: %s); saves copy from the GPU more slowly",
                _first_line(self._twin_error),
            )
            return
        if cache is not self.state_dict_cache:
            return  # made anew since (a layout change): these twins fit the old one
        for slot, twin in zip(_slots(cache), twins, strict=True):
            _place(slot, twin)


@dataclass
class _Pending:
    """A save in flight, and (rank 0) what its done-callback made of it."""

    step: int
    future: Future[Metadata]
    settled: threading.Event = field(default_factory=threading.Event)
    final: bool = False  # finish()'s: reported by the caller
    outcome: str = "failed"  # "committed" | "dropped" | "failed"
    path: Path | None = None
    error: str = ""


class AsyncSaver:
    """Sharded checkpoints of one training loop, written in the background; see the module
    docstring. `start` and `wait` are collectives of the loop's ranks."""

    def __init__(
        self,
        checkpoints: Checkpointer,
        state: ShardedState,
        strategy: str,
        rank: int,
        world_size: int,
        group: dist.ProcessGroup | None = None,
        writer: Writer | None = None,
        on_commit: Callable[[int], None] | None = None,
    ) -> None:
        self.checkpoints, self.state, self.strategy = checkpoints, state, strategy
        self.rank, self.world_size, self.group = rank, world_size, group
        self.writer = writer or FileSystemWriter  # looked up now: tests swap in a slow one
        self.background = checkpoint_group(group)
        self.stager = HostStager()
        self._pending: _Pending | None = None
        self._newest: tuple[int, Path] | None = None  # rank 0: set by the done-callback
        self._reported: tuple[int, Path] | None = None
        self._failures = FailuresInARow(checkpoints.directory)
        # Rank 0: called with the step as soon as a save is committed, on the background
        # thread (not for `finish`'s, which the caller reports): progress says it at once,
        # also when training hangs right after it (a sync point would never come).
        self.on_commit = on_commit
        self._finishing = False

    def start(self, step: int) -> Outcome | None:
        """Collective: wait for the previous save (its outcome is returned), then stage this
        rank's shards of `step` in host memory and write them in the background."""
        previous = self.wait()
        staging = prepare_staging(self.checkpoints, step, self.rank, self.group)
        # The copy to host memory is done here, on the training thread, before async_save
        # returns: what the next optimizer step changes is not what is being written.
        future = async_save(
            self.state.state_dict(),
            storage_writer=self.writer(staging),
            process_group=self.background,
            async_stager=self.stager,
        )
        assert isinstance(future, Future), "a blocking stager returns the upload's future"
        pending = _Pending(step, future, final=self._finishing)
        if self.rank == 0:
            future.add_done_callback(lambda f: self._settle(pending, f))
        self._pending = pending
        return previous

    def wait(self) -> Outcome | None:
        """Collective: block until the save in flight (if any) has ended and, on rank 0,
        been committed or dropped; its outcome, alike on every rank."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        pending.future.exception()  # wait; rank 0's callback logs the error
        if self.rank == 0:
            # Not future.result(): a future wakes its waiters before it runs its callbacks.
            pending.settled.wait()
        kind, error = broadcast_object((pending.outcome, pending.error), group=self.background)
        outcome = Outcome(pending.step, kind, pending.path, error)
        if kind != "committed":
            # Every rank cleans its own view: on per-pod volumes rank 0 cannot reach the others.
            shutil.rmtree(self.checkpoints.staging_dir(pending.step), ignore_errors=True)
        return self._failures.settle(outcome)

    def finish(self, step: int) -> Outcome:
        """Collective: save `step` and wait until it is committed (end of training,
        SIGTERM); TrainerError when it could not be written."""
        self._finishing = True
        try:
            self.start(step)
            outcome = self.wait()
        finally:
            self._finishing = False
        assert outcome is not None
        if outcome.kind == "failed":
            raise TrainerError(
                f"the checkpoint of step {step} could not be written to "
                f"{self.checkpoints.directory}: {outcome.error}"
            )
        return outcome

    def committed(self) -> tuple[int, Path] | None:
        """Rank 0, without blocking: (step, path) of the newest checkpoint committed since
        the last call (for progress reports), else None."""
        newest = self._newest
        if newest is None or newest is self._reported:
            return None
        self._reported = newest
        return newest

    def _settle(self, pending: _Pending, future: Future[Metadata]) -> None:
        """Rank 0's done-callback (on the background thread): commit the save or say why
        not. Nothing may escape: a callback's exception is only logged by the executor."""
        step, staging = pending.step, self.checkpoints.staging_dir(pending.step)
        try:
            exc = future.exception()
            if exc is not None:
                raise exc
            missing = missing_files(future.result(), staging)
            if missing:
                shutil.rmtree(staging, ignore_errors=True)
                log.warning(drop_message(step, missing, self.checkpoints.directory))
                pending.outcome = "dropped"
            else:
                pending.path = self.checkpoints.commit_sharded(step, self.strategy, self.world_size)
                pending.outcome = "committed"
                self._newest = (step, pending.path)
                log.info("sharded checkpoint of step %d written to %s", step, pending.path)
                if self.on_commit is not None and not pending.final:
                    self.on_commit(step)
        except BaseException as exc:  # reported to every rank by wait()
            shutil.rmtree(staging, ignore_errors=True)
            pending.outcome, pending.error = "failed", _first_line(exc)
            log.error(
                "checkpoint of step %d could not be written in the background (%s); the "
                "previous checkpoint stays the latest",
                step,
                pending.error,
            )
        finally:
            pending.settled.set()


def _first_line(exc: BaseException) -> str:
    """One line that names the error: DCP's CheckpointException carries each failed rank's
    exception and would otherwise print only its tracebacks."""
    if isinstance(exc, CheckpointException):
        return "; ".join(
            f"rank {rank}: {_first_line(cause)}" for rank, (cause, _) in exc.failures.items()
        )
    return error_line(exc)
