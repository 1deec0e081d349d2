"""Faults injected on purpose, for tests and benchmarks only (docs/env-contract.md, "Test-only
fault hooks"): a rank that hangs at a step, or one slower than the others at every step.

`DTJ_FAULT_HANG_AT_STEP=<step>` with `DTJ_FAULT_HANG_RANK=<rank>`: that rank blocks forever
before running step `<step>` (0-based: after `<step>` steps), the way a rank stuck in a data
loader or a dead device would. `DTJ_FAULT_SLOW_RANK=<rank>` with
`DTJ_FAULT_SLOW_SECONDS=<s>`: that rank computes `<s>` seconds longer at every step.
Both strike only the gang `DTJ_FAULT_GANG` (default 0, the first; `DTJ_GANG_GENERATION`
says which gang a pod belongs to): a fault that the restart cures, as a stuck NIC or a
wedged data loader would be, so a test sees the restarted gang finish.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dtjob_trainer.errors import ConfigError


@dataclass(frozen=True)
class FaultPlan:
    """The faults asked for (None: none of that kind)."""

    hang_at_step: int | None = None
    hang_rank: int = 0
    slow_rank: int | None = None
    slow_seconds: float = 0.0


def read_fault_plan(environ: Mapping[str, str]) -> FaultPlan | None:
    """The plan in the DTJ_FAULT_* variables; None when none is set."""
    if not any(k.startswith("DTJ_FAULT_") and v for k, v in environ.items()):
        return None

    def number(name: str, default: str, kind: Callable[[str], float | int]) -> float | int:
        raw = environ.get(name) or default
        try:
            return kind(raw)
        except ValueError:
            raise ConfigError(f"environment variable {name}: {raw!r} is not a number") from None

    hang = environ.get("DTJ_FAULT_HANG_AT_STEP")
    slow = environ.get("DTJ_FAULT_SLOW_RANK")
    gang = int(number("DTJ_FAULT_GANG", "0", int))
    if int(number("DTJ_GANG_GENERATION", "0", int)) != gang:
        return None  # another gang's fault
    return FaultPlan(
        hang_at_step=int(number("DTJ_FAULT_HANG_AT_STEP", "0", int)) if hang else None,
        hang_rank=int(number("DTJ_FAULT_HANG_RANK", "0", int)),
        slow_rank=int(number("DTJ_FAULT_SLOW_RANK", "0", int)) if slow else None,
        slow_seconds=float(number("DTJ_FAULT_SLOW_SECONDS", "0", float)),
    )


def step_fault(plan: FaultPlan | None, rank: int) -> Callable[[int], None] | None:
    """What this rank runs before each step (`fault(step)`), or None: no cost when unset."""
    if plan is None:
        return None
    hang = plan.hang_at_step if plan.hang_rank == rank else None
    slow = plan.slow_seconds if plan.slow_rank == rank else 0.0
    if hang is None and slow <= 0:
        return None

    def fault(step: int) -> None:
        if step == hang:
            # When it struck, for bench/stall_detection.py (the hang to the declaration).
            print(f"dtjob: fault: rank {rank} hangs before step {step} at {time.time():.3f}",
                  file=sys.stderr, flush=True)  # fmt: skip
            while True:  # forever: only the operator (or a test) ends this process
                time.sleep(60)
        if slow > 0:
            _compute_for(slow)

    return fault


def _compute_for(seconds: float) -> None:
    # Busy, not asleep: a slow rank computes longer, and busy time is what the straggler
    # measure compares (heartbeat.slowdowns); a sleeping rank would look like a waiting one.
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
