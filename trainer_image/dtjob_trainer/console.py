"""Rank 0's console: one line per log interval (step, loss, samples/s, ETA), or a
progress bar redrawn in place when stderr is a terminal."""

from __future__ import annotations

import sys
from typing import TextIO


def format_eta(seconds: float | None) -> str:
    """H:MM:SS, or ? when unknown."""
    if seconds is None:
        return "?"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def format_line(
    step: int, total: int, epoch: int, loss: float | None, rate: float | None, eta: float | None
) -> str:
    """The interval line."""
    loss_s = "?" if loss is None else f"{loss:.6g}"
    rate_s = "?" if rate is None else f"{rate:,.0f}"
    return (
        f"step {step}/{total} ({100 * step // max(total, 1)}%) | epoch {epoch} | "
        f"loss {loss_s} | {rate_s} samples/s | eta {format_eta(eta)}"
    )


class Console:
    """Writes interval lines (or a bar on a terminal) and plain messages."""

    BAR_WIDTH = 24

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = self.enabled and self.stream.isatty()
        self._bar_open = False

    def interval(
        self,
        step: int,
        total: int,
        epoch: int,
        loss: float | None,
        rate: float | None,
        eta: float | None,
        final: bool = False,
    ) -> None:
        """Report one interval."""
        if not self.enabled:
            return
        line = format_line(step, total, epoch, loss, rate, eta)
        if self.tty:
            filled = self.BAR_WIDTH * step // max(total, 1)
            bar = "#" * filled + "." * (self.BAR_WIDTH - filled)
            self.stream.write(f"\r[{bar}] {line}\033[K" + ("\n" if final else ""))
            self._bar_open = not final
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A plain line (ends an open progress bar first)."""
        if not self.enabled:
            return
        if self._bar_open:
            self.stream.write("\n")
            self._bar_open = False
        self.stream.write(text + "\n")
        self.stream.flush()
