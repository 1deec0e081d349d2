"""Checkpoints: one file per checkpoint, written by rank 0 only, atomically.

Format (directory = DTJ_CHECKPOINT_DIR):

    step-000000150.pt   torch.save of {"format": 1, "step": 150, "strategy": "DataParallel",
                        "world_size": 2, "time": <unix seconds>, "state": <strategy state>}
    latest              the file name of the newest complete checkpoint

Each file is written to a temporary name, fsynced and renamed into place; `latest` is
replaced the same way afterwards, so a crash at any moment leaves the previous checkpoint
as `latest`, never a half-written one. The strategy state holds full (unsharded) tensors
gathered to rank 0 (see `dtjob_trainer.loop.Trainable`), so it does not depend on the
number of processes unless a strategy says so. `step` counts completed optimizer steps.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FORMAT_VERSION = 1
LATEST = "latest"
_NAME = re.compile(r"^step-(\d{9})\.pt$")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint."""

    step: int
    strategy: str
    world_size: int
    time: float
    state: dict[str, Any]


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
    """Saves, finds and prunes checkpoints in one directory."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        self.directory = Path(directory)
        self.keep = keep

    @staticmethod
    def file_name(step: int) -> str:
        """Name of the checkpoint of `step`."""
        return f"step-{step:09d}.pt"

    def save(self, step: int, strategy: str, world_size: int, state: dict[str, Any]) -> Path:
        """Write the checkpoint of `step`, point `latest` at it, prune old ones."""
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
        _atomic_write(self.directory / LATEST, lambda fh: fh.write(path.name.encode()))
        self._prune()
        return path

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints present, ascending."""
        if not self.directory.is_dir():
            return []
        found = (_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def _prune(self) -> None:
        for step in self.steps()[: -self.keep]:
            try:
                (self.directory / self.file_name(step)).unlink()
            except OSError as exc:  # pruning is housekeeping; a failure must not stop training
                log.warning("could not delete old checkpoint of step %d: %s", step, exc)

    def _candidates(self) -> list[Path]:
        names: list[str] = []
        latest = self.directory / LATEST
        if latest.is_file():
            names.append(latest.read_text().strip())
        names += [self.file_name(s) for s in reversed(self.steps())]
        return [self.directory / n for n in dict.fromkeys(names)]

    def load_latest(self) -> Checkpoint | None:
        """The newest readable checkpoint, or None when there is none."""
        for path in self._candidates():
            if not path.is_file():
                continue
            try:
                data = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as exc:
                log.warning("skipping unreadable checkpoint %s: %s", path, exc)
                continue
            if data.get("format") != FORMAT_VERSION:
                log.warning("skipping checkpoint %s of unknown format", path)
                continue
            return Checkpoint(
                data["step"], data["strategy"], data["world_size"], data["time"], data["state"]
            )
        return None
