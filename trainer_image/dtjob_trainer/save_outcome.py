"""What the background savers share (async_checkpoint.AsyncSaver, sharded; async_full.FullSaver,
full): how a save ended, the count of failures in a row that ends the run, and the one line
that names a write's error."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dtjob_trainer.errors import TrainerError

MAX_FAILURES_IN_A_ROW = 2


@dataclass(frozen=True)
class Outcome:
    """How a save ended: "committed" (with its path, on rank 0), "dropped" (sharded: not
    every rank's shards were there) or "failed" (with its error)."""

    step: int
    kind: str
    path: Path | None = None
    error: str = ""


class FailuresInARow:
    """A failed save is survived (the previous checkpoint stays `latest`), but
    MAX_FAILURES_IN_A_ROW of them end the run: the storage is broken, not blipping."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.count = 0

    def settle(self, outcome: Outcome) -> Outcome:
        """`outcome`, counted; TrainerError at MAX_FAILURES_IN_A_ROW failures in a row."""
        if outcome.kind != "failed":
            self.count = 0
            return outcome
        self.count += 1
        if self.count >= MAX_FAILURES_IN_A_ROW:
            raise TrainerError(
                f"{self.count} checkpoints in a row could not be written to "
                f"{self.directory}, the last (step {outcome.step}): {outcome.error}"
            )
        return outcome


def error_line(exc: BaseException) -> str:
    """The error's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
