"""Checkpoints: one per step, each either complete or ignored.

Two forms live side by side in one directory (DTJ_CHECKPOINT_DIR):

    step-000000150.pt   full state, written by rank 0 alone: torch.save of {"format": 1,
                        "step": 150, "strategy": "DataParallel", "world_size": 2,
                        "time": <unix seconds>, "state": <strategy state>}
    step-000000200/     sharded state (FSDP, CPUOffload, and the pipelines on torch's
                        schedules: Pipeline with GPipe, 1F1B or Interleaved1F1B,
                        ModelParallel, Hybrid, with or without tensorParallel), written by
                        every rank in parallel with torch.distributed.checkpoint
                        (`dtjob_trainer.sharded`, strategies/stage_ckpt.py):
                        __<rank>_0.distcp shards, DCP's .metadata, and checkpoint.json
                        ({"format": 2, "step", "strategy", "world_size", "time"})
    latest              the name of the newest complete checkpoint

A file is written to a temporary name, fsynced and renamed into place. A sharded checkpoint
is written into `.step-<step>.partial/` and renamed to `step-<step>/` by rank 0 only after
every rank's shards are in it (DCP's save returns on rank 0 once all ranks have written)
and checkpoint.json is written; a directory without checkpoint.json is never used. `latest`
is replaced afterwards, so a crash at any moment leaves the previous checkpoint as `latest`,
never a half-written one. `step` counts completed optimizer steps. The training loop writes
sharded checkpoints in the background (`dtjob_trainer.async_checkpoint`): rank 0 then calls
`commit_sharded` from the save's done-callback, on another thread, while the training thread
does not touch the directory until it waits for that save (one save in flight at a time).
Full checkpoints are written by rank 0 from a host copy on a thread of its own
(`dtjob_trainer.async_full`), under the same rule.

Every sharded checkpoint has one layout, parameters and optimizer state keyed by the full
model's parameter names, so FSDP, CPUOffload, DataParallel (reading whole tensors) and the
pipelines above read each other's at any process count or layout. The other strategies
(ParameterServer, the asynchronous and heterogeneous pipelines: PipeDream, PipeDream2BW,
roles.stage.groups) write and read full checkpoints only (`sharded_refusal`); the
pipelines still read full checkpoints written before they wrote sharded ones.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dtjob_trainer.errors import ConfigError

FORMAT_VERSION = 1
SHARDED_FORMAT_VERSION = 2
LATEST = "latest"
MARKER = "checkpoint.json"
"""Written last into a sharded checkpoint: a directory without it is incomplete."""
_NAME = re.compile(r"^step-(\d{9})(\.pt)?$")
_STAGING = re.compile(r"^\.step-\d{9}\.partial$")
_PARTIAL_FILE = re.compile(r"^\.step-\d{9}\.pt\.tmp-\d+$")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint."""

    step: int
    strategy: str
    world_size: int
    time: float
    state: dict[str, Any]
    """The full state (empty for a sharded checkpoint: its ranks read their shards)."""
    path: Path | None = None
    sharded: bool = False

    def full_state(self, reader: str) -> dict[str, Any]:
        """The full state, for a strategy (`reader`) that reads only full checkpoints;
        ConfigError when this one is sharded."""
        if self.sharded:
            raise ConfigError(sharded_refusal(self.path.name if self.path else "?", reader))
        return self.state


def sharded_refusal(name: str, reader: str) -> str:
    """Why `reader` cannot resume from the sharded checkpoint `name`, and what to do."""
    return (
        f"checkpoint.claimName: the latest checkpoint, {name}, is sharded (written by FSDP, "
        f"CPUOffload, Pipeline, ModelParallel or Hybrid) and {reader} reads only full "
        "checkpoints; resume with FSDP, CPUOffload, DataParallel, ModelParallel, Hybrid or "
        "Pipeline (schedule GPipe, 1F1B or Interleaved1F1B, without roles.stage.groups), or "
        "use an empty checkpoint directory"
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class Checkpointer:
    """Saves, finds and prunes checkpoints in one directory (rank 0's file operations)."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        self.directory = Path(directory)
        self.keep = keep

    @staticmethod
    def file_name(step: int) -> str:
        """Name of the full checkpoint of `step`."""
        return f"step-{step:09d}.pt"

    @staticmethod
    def dir_name(step: int) -> str:
        """Name of the sharded checkpoint of `step`."""
        return f"step-{step:09d}"

    def staging_dir(self, step: int) -> Path:
        """Where every rank writes its shards of `step` before rank 0 commits them."""
        return self.directory / f".step-{step:09d}.partial"

    def save(self, step: int, strategy: str, world_size: int, state: dict[str, Any]) -> Path:
        """Write the full checkpoint of `step`, point `latest` at it, prune old ones."""
        self.directory.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": FORMAT_VERSION,
            "step": step,
            "strategy": strategy,
            "world_size": world_size,
            "time": time.time(),
            "state": state,
        }
        path = self.directory / self.file_name(step)
        _atomic_write(path, lambda fh: torch.save(payload, fh))
        return self._publish(path)

    def commit_sharded(self, step: int, strategy: str, world_size: int) -> Path:
        """Rank 0, once every rank's shards of `step` are in `staging_dir(step)`: mark it
        complete, rename it to its final name, point `latest` at it, prune old ones."""
        staging = self.staging_dir(step)
        header = {
            "format": SHARDED_FORMAT_VERSION,
            "step": step,
            "strategy": strategy,
            "world_size": world_size,
            "time": time.time(),
        }
        _atomic_write(staging / MARKER, lambda fh: fh.write(json.dumps(header).encode()))
        final = self.directory / self.dir_name(step)
        if final.exists():  # a step trained again after a resume from an older checkpoint
            shutil.rmtree(final)
        os.replace(staging, final)
        _fsync_dir(self.directory)
        return self._publish(final)

    def _publish(self, path: Path) -> Path:
        _atomic_write(self.directory / LATEST, lambda fh: fh.write(path.name.encode()))
        self._prune()
        return path

    def _complete(self) -> dict[int, Path]:
        """Complete checkpoints by step (a sharded one wins over a file of the same step)."""
        if not self.directory.is_dir():
            return {}
        found: dict[int, Path] = {}
        for p in sorted(self.directory.iterdir(), key=lambda p: p.is_dir()):
            m = _NAME.match(p.name)
            if m and (p.is_file() if m.group(2) else (p / MARKER).is_file()):
                found[int(m.group(1))] = p
        return found

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints present, ascending."""
        return sorted(self._complete())

    def _prune(self) -> None:
        complete = self._complete()
        for step in sorted(complete)[: -self.keep]:
            for path in (
                self.directory / self.file_name(step),
                self.directory / self.dir_name(step),
            ):
                self._remove(path, f"old checkpoint of step {step}")
        # Shards of saves that never completed (a crash, or a directory not shared by the
        # pods), and full checkpoints a process died writing (a background write is cut off
        # with its process): nothing is writing them now, since saves are one at a time and
        # this runs after one completed.
        for path in self.directory.iterdir():
            if _STAGING.match(path.name) or _PARTIAL_FILE.match(path.name):
                self._remove(path, "incomplete checkpoint")

    @staticmethod
    def _remove(path: Path, what: str) -> None:
        try:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        except OSError as exc:  # pruning is housekeeping; a failure must not stop training
            log.warning("could not delete %s %s: %s", what, path.name, exc)

    def _candidates(self) -> list[Path]:
        complete = self._complete()
        names: list[str] = []
        latest = self.directory / LATEST
        if latest.is_file():
            names.append(latest.read_text().strip())
        names += [complete[s].name for s in sorted(complete, reverse=True)]
        return [self.directory / n for n in dict.fromkeys(names)]

    def load_latest(self, skip: Collection[str] = ()) -> Checkpoint | None:
        """The newest readable checkpoint whose name is not in `skip`, or None. A sharded
        one comes with its header only: its ranks read the shards (`sharded.load_sharded`)."""
        for path in self._candidates():
            if path.name in skip:
                continue
            loaded = self._read_header(path) if path.is_dir() else self._read_file(path)
            if loaded is not None:
                return loaded
        return None

    @staticmethod
    def _read_header(path: Path) -> Checkpoint | None:
        try:
            data = json.loads((path / MARKER).read_text())
            if data.get("format") != SHARDED_FORMAT_VERSION:
                raise ValueError(f"unknown format {data.get('format')!r}")
            # Imported here: torch.distributed.checkpoint costs a trainer process about a
            # second of CPU at start-up, and only sharded checkpoints need it (loop.py).
            from dtjob_trainer.dcp_io import missing_shards

            missing = missing_shards(path)
            if missing:
                raise ValueError(f"shard files missing or cut short: {', '.join(missing)}")
            return Checkpoint(
                int(data["step"]),
                str(data["strategy"]),
                int(data["world_size"]),
                float(data["time"]),
                {},
                path,
                sharded=True,
            )
        except Exception as exc:  # whatever is wrong with it, an older one may be whole
            log.warning("skipping incomplete sharded checkpoint %s: %s", path, exc)
            return None

    @staticmethod
    def _read_file(path: Path) -> Checkpoint | None:
        if not path.is_file():
            return None
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            log.warning("skipping unreadable checkpoint %s: %s", path, exc)
            return None
        if data.get("format") != FORMAT_VERSION:
            log.warning("skipping checkpoint %s of unknown format", path)
            return None
        return Checkpoint(
            data["step"], data["strategy"], data["world_size"], data["time"], data["state"], path
        )
