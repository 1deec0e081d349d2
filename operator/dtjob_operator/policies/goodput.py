"""Moving a job's goodput ledger on (issue 36; dtjob_api/goodput.py says what the buckets
mean and how readers add them up). Pure: the planner calls `advance` once a pass with the
phase it leaves the job in, and with what a gang restart threw away."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from dtjob_api.goodput import PHASE_BUCKETS, Ledger
from dtjob_api.status import TERMINAL_PHASES, JobPhase


@dataclass(frozen=True)
class Restart:
    """What a gang restart threw away, in seconds of the gang's wall time."""

    lost_work: float = 0.0
    stalled: float = 0.0
    resize: bool = False


def advance(
    ledger: Ledger,
    phase: JobPhase,
    gpus: int,
    now: datetime,
    restart: Restart | None = None,
) -> tuple[Ledger, dict[str, float]]:
    """The ledger after a pass that leaves the job in `phase` with a gang of `gpus`, and the
    GPU-seconds this pass added per bucket (for the counters). Unchanged while the phase
    stays and nothing restarted."""
    now = now.replace(microsecond=0)
    if ledger.since is None or ledger.phase is None:
        if phase in TERMINAL_PHASES:
            return ledger, {}
        return replace(ledger, since=now, phase=phase, gpus=gpus), {}
    if phase == ledger.phase and restart is None and gpus == ledger.gpus:
        return ledger, {}
    added: dict[str, float] = {}
    elapsed = max(0.0, (now - ledger.since).total_seconds())
    bucket = "resizing" if ledger.resizing else PHASE_BUCKETS.get(ledger.phase, "queued")
    added[bucket] = elapsed * ledger.gpus
    if restart is not None and ledger.phase == JobPhase.RUNNING:
        # What the restart threw away came out of this Running segment, never more.
        left = added.get("training", 0.0)
        for name, wall in (("stalled", restart.stalled), ("lostWork", restart.lost_work)):
            moved = min(left, max(0.0, wall) * ledger.gpus)
            if moved:
                added[name] = added.get(name, 0.0) + moved
                left -= moved
        added["training"] = left
    seconds = dict(ledger.seconds)
    for name, value in added.items():
        seconds[name] = seconds.get(name, 0.0) + value
    closed = phase in TERMINAL_PHASES
    return (
        Ledger(
            since=None if closed else now,
            phase=None if closed else phase,
            gpus=0 if closed else gpus,
            resizing=bool(restart and restart.resize) and not closed,
            seconds=seconds,
        ),
        {k: v for k, v in added.items() if v},
    )


def lost_work(progress: object, seconds_per_step: object) -> float:
    """Wall seconds of the steps since the last checkpoint (progress.json's `step` and
    `lastCheckpointStep`, the stall watch's learned seconds per step): the work a restart
    throws away and the next gang computes again. 0 when any of them is unknown."""
    if not isinstance(progress, dict) or not isinstance(seconds_per_step, int | float):
        return 0.0
    step, saved = progress.get("step"), progress.get("lastCheckpointStep")
    if not isinstance(step, int) or isinstance(step, bool):
        return 0.0
    saved = saved if isinstance(saved, int) and not isinstance(saved, bool) else 0
    return max(0, step - saved) * max(0.0, float(seconds_per_step))
