"""Full checkpoints written in the background: rank 0 copies the gathered state to host
memory and a thread of its own writes it, while the training loop goes on.

A full checkpoint (DataParallel, TensorParallel, ParameterServer Sync, EASGD, PipeDream) is
the whole training state in one file that rank 0 writes with `torch.save` and fsyncs, while
every other rank waits at its next collective. Now `FullSaver.start` takes a host copy of
the state (a copy from the GPU, or a clone of CPU tensors: what the state holds may be the
live parameters and optimizer state, which the next step changes) and returns; the write,
the rename into place, `latest` and the pruning are `Checkpointer.save`'s, on the saver's
thread (`bench/async_checkpoint.py`'s `full` figures).

Why the pieces are as they are:

- At most one save in flight: `start` first waits for the previous one, so that two
  copies of the state are never held at once for writing, and an older save cannot point
  `latest` past a newer one.
- The copy is what the loop keeps as the step's state (the loop holds it until the next
  checkpoint, for the result file): the gathered state is dropped, and the host holds one
  copy of the state, as it did with the blocking write.
- A copy that would not fit in the memory left to the process (its cgroup's limit, else
  the machine's available memory) is not taken: that checkpoint is written in the
  foreground, as before, and the log says so once. An out-of-memory kill of rank 0 would
  lose more than the stall.
- A failed write is logged with its error and leaves the previous checkpoint as `latest`;
  training goes on and the next checkpoint tries again, but two failures in a row end the
  run (the storage is broken), as does a failure of the final save (`finish`: the end of
  training and SIGTERM wait for their checkpoint, so the process never exits before it is
  whole).
- Rank 0 alone: the other ranks take no part in a full checkpoint's write, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.errors import TrainerError
from dtjob_trainer.save_outcome import FailuresInARow, Outcome, error_line

log = logging.getLogger(__name__)

GIB = 1 << 30

FreeMemory = Callable[[], int | None]


Live = set[int] | None
"""The storages (data_ptr) of the live training state's tensors, or None: unknown."""


def _copied(t: torch.Tensor, live: Live) -> bool:
    """Whether `t` must be copied: it is on a device, or it may share its storage with a
    live tensor (with `live` unknown, any host tensor may)."""
    if t.device.type != "cpu":
        return True
    return live is None or t.untyped_storage().data_ptr() in live


def state_bytes(obj: Any, live: Live = None) -> int:
    """The bytes of the tensors of a nested state (dicts, lists, tuples) that `host_copy`
    copies."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size() if _copied(obj, live) else 0
    if isinstance(obj, dict):
        return sum(state_bytes(v, live) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(state_bytes(v, live) for v in obj)
    return 0


def host_copy(obj: Any, live: Live = None) -> Any:
    """A copy of a nested state that no later training step changes: every tensor that may
    share memory with the live state copied to host memory (from the GPU, or a clone on
    the CPU), every dict, list and tuple made anew; other values (numbers, strings, None)
    are immutable and kept. A host tensor whose storage is not in `live` (known) is
    already a copy of its own, made by the gathering (a GPU tensor offloaded), and is kept
    as it is: on a GPU that spares a second host copy of the whole state."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True) if _copied(obj, live) else obj
    if isinstance(obj, dict):
        return {k: host_copy(v, live) for k, v in obj.items()}
    if isinstance(obj, list):
        return [host_copy(v, live) for v in obj]
    if isinstance(obj, tuple):
        return tuple(host_copy(v, live) for v in obj)
    return obj


def live_storages(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> set[int]:
    """The storages of a model's parameters and buffers and of its optimizer's state."""
    tensors: list[Any] = [*model.parameters(), *model.buffers()]
    for per_param in optimizer.state.values():
        tensors += list(per_param.values())
    for group in optimizer.param_groups:
        tensors += [v for k, v in group.items() if k != "params"]
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


# The container's memory limit and use: cgroup v2, then v1 (older nodes).
_CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)
_NO_LIMIT = 1 << 62  # cgroup v1 says "no limit" with a huge number (v2 with "max")


def free_memory() -> int | None:
    """Bytes this process may still take: its container's memory limit less its use (the
    pod's limit), else the machine's MemAvailable; None when neither can be read."""
    for limit_file, used_file in _CGROUP_FILES:
        limit, used = _read_int(limit_file), _read_int(used_file)  # "max" reads as None
        if limit is not None and used is not None and limit < _NO_LIMIT:
            return max(0, limit - used)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@dataclass
class _Pending:
    """A save, and what became of it (set by whichever thread wrote it)."""

    step: int
    thread: threading.Thread | None = None
    path: Path | None = None
    error: str = ""
    final: bool = False


class FullSaver:
    """Rank 0's full checkpoints of one training loop, written by a thread of their own;
    see the module docstring."""

    def __init__(
        self,
        checkpoints: Checkpointer,
        strategy: str,
        world_size: int,
        free: FreeMemory = free_memory,
        on_commit: Callable[[int], None] | None = None,
    ) -> None:
        self.checkpoints, self.strategy, self.world_size = checkpoints, strategy, world_size
        self.free = free
        # Called with the step as soon as a checkpoint is committed, on the writing thread:
        # progress says it at once, also when training hangs right after (a sync point
        # would never come).
        self.on_commit = on_commit
        self._pending: _Pending | None = None
        self._failures = FailuresInARow(checkpoints.directory)
        self._said_foreground = False

    def start(self, step: int, state: dict[str, Any], live: Live = None) -> dict[str, Any]:
        """Wait for the previous save, then write `state` (the state of `step`) in the
        background from a host copy (`host_copy`, with the live state's storages when
        known); that copy, which the caller keeps instead of `state`. Where the copy does
        not fit in memory, `state` is written now and returned. Raises TrainerError after
        MAX_FAILURES_IN_A_ROW failed saves."""
        self.wait()
        size, free = state_bytes(state, live), self.free()
        if free is not None and size > free:
            if not self._said_foreground:
                log.warning(
                    "full checkpoints are written in the foreground: a host copy of the "
                    "state (%.1f GiB) does not fit in the %.1f GiB of memory left to this "
                    "process (more memory for the pod would let training go on meanwhile)",
                    size / GIB,
                    free / GIB,
                )
                self._said_foreground = True
            pending = _Pending(step)
            self._attempt(pending, state)
            self._settle(pending)
            return state
        copy: dict[str, Any] = host_copy(state, live)
        pending = _Pending(step)
        pending.thread = threading.Thread(
            target=self._attempt,
            args=(pending, copy),
            name=f"dtjob-checkpoint-{step}",
            daemon=True,
        )
        self._pending = pending
        pending.thread.start()
        return copy

    def wait(self) -> Outcome | None:
        """Block until the save in flight (if any) has ended; its outcome. Raises
        TrainerError after MAX_FAILURES_IN_A_ROW failed saves."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        assert pending.thread is not None
        pending.thread.join()
        return self._settle(pending)

    def finish(self, step: int, state: dict[str, Any]) -> Path:
        """Wait for the save in flight, then write `state` now (end of training, SIGTERM):
        its path; TrainerError when it could not be written."""
        self.wait()
        pending = _Pending(step, final=True)
        self._attempt(pending, state)
        if pending.path is None:
            raise TrainerError(
                f"the checkpoint of step {step} could not be written to "
                f"{self.checkpoints.directory}: {pending.error}"
            )
        return pending.path

    def _attempt(self, pending: _Pending, state: dict[str, Any]) -> None:
        """Write the checkpoint; its path, or its error, into `pending` (nothing escapes:
        on the saver's thread an exception would only be printed)."""
        try:
            path = self.checkpoints.save(pending.step, self.strategy, self.world_size, state)
        except Exception as exc:
            pending.error = error_line(exc)
            log.error(
                "checkpoint of step %d could not be written (%s); the previous checkpoint "
                "stays the latest",
                pending.step,
                pending.error,
            )
            return
        pending.path = path
        log.info("checkpoint of step %d written to %s", pending.step, path)
        if self.on_commit is not None and not pending.final:  # the caller reports the final
            self.on_commit(pending.step)

    def _settle(self, pending: _Pending) -> Outcome:
        """Its outcome, counted (TrainerError at MAX_FAILURES_IN_A_ROW in a row)."""
        if pending.path is not None:
            return self._failures.settle(Outcome(pending.step, "committed", pending.path))
        return self._failures.settle(Outcome(pending.step, "failed", error=pending.error))
