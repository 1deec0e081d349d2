"""What the sections of bench/gpu_claims.py share: where they run, their records' head,
their deadline, how a child hands its record over, and the rows of the closing table.

Like every claims_*.py module, it imports only the standard library and torch: the GPU
machine's image has nothing else (docs/gpu.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
# Kept from a child's deadline for ending its last launch (a CUDA process takes seconds to
# die) and printing its record.
CHILD_MARGIN_SECONDS = 8.0
GIB, MIB = 2**30, 2**20


def on_gpu(rehearse: bool) -> bool:
    """Whether the sections run on the GPU (else the CPU rehearsal)."""
    return torch.cuda.is_available() and not rehearse


def section_header(rehearse: bool) -> dict[str, Any]:
    """What every section's record starts with: where it ran."""
    gpu = on_gpu(rehearse)
    head: dict[str, Any] = {
        "device": "cuda" if gpu else "cpu",
        "rehearsal": not gpu,
        "torch": torch.__version__,
    }
    if gpu:
        head["gpu"] = torch.cuda.get_device_name(0)
    return head


class Deadline:
    """Seconds left to a monotonic deadline (clock steps do not matter)."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return self.at - time.monotonic()


def emit(record: dict[str, Any]) -> None:
    """A child's record so far, as one JSON line: the parent keeps the last whole one,
    so a child killed at its deadline still hands over what it measured."""
    print(json.dumps(record), flush=True)


def fmt(value: Any) -> str:
    return "-" if value is None else str(value)


Row = tuple[str, str]
