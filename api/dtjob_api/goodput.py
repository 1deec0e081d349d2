"""Where a job's GPU time goes: the status.goodput ledger, as the operator writes it and
`kubectl dtj top`/why read it (docs/lifecycle.md, "Goodput"). Pure; the operator's side,
which moves the ledger on, is dtjob_operator/policies/goodput.py.

Every second of a job's life counts its gang's GPUs once, in one bucket by the phase it was
in: `training` (Running), `queued` (Pending, Queued, Suspended: GPUs it asked for and did
not hold), `starting` (Starting: held, not yet training), `restarting` (Restarting after a
failure or stall), `resizing` (Restarting for an elastic resize). A restart then moves out of
`training` what it threw away: `lostWork`, the steps since the last checkpoint, which the
next gang computes again, and `stalled`, the time the step stood still before a stall was
declared. `training` is what is left: the goodput.

The ledger is closed only when the phase changes, so that a pass that changes nothing
writes nothing: `since` and `phase` are the open segment, which readers add up to their own
clock (`totals`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.status import JobPhase

BUCKETS = ("training", "queued", "starting", "restarting", "resizing", "lostWork", "stalled")
PHASE_BUCKETS = {
    JobPhase.PENDING: "queued",
    JobPhase.QUEUED: "queued",
    JobPhase.SUSPENDED: "queued",
    JobPhase.STARTING: "starting",
    JobPhase.RUNNING: "training",
    JobPhase.RESTARTING: "restarting",
}


@dataclass(frozen=True)
class Ledger:
    """status.goodput, typed."""

    since: datetime | None = None
    """When the open segment began; None once the job finished (or before it began)."""
    phase: JobPhase | None = None
    """The open segment's phase."""
    gpus: int = 0
    """GPUs of the gang during the open segment."""
    resizing: bool = False
    """The open segment is a Restarting for an elastic resize."""
    seconds: Mapping[str, float] = field(default_factory=dict)
    """GPU-seconds per closed bucket."""

    @classmethod
    def from_status(cls, value: object) -> Ledger:
        if not isinstance(value, Mapping):
            return cls()
        try:
            phase = JobPhase(str(value.get("phase"))) if value.get("phase") else None
        except ValueError:
            phase = None
        gpus = value.get("gpus")
        spent = value.get("gpuSeconds") if isinstance(value.get("gpuSeconds"), Mapping) else {}
        return cls(
            since=_time(value.get("since")),
            phase=phase,
            gpus=gpus if isinstance(gpus, int) and gpus >= 0 else 0,
            resizing=value.get("resizing") is True,
            seconds={
                b: float(v)
                for b, v in (spent or {}).items()
                if b in BUCKETS and isinstance(v, int | float) and not isinstance(v, bool)
            },
        )

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gpuSeconds": {b: round(s) for b, s in self.seconds.items() if s}}
        if self.since is not None and self.phase is not None:
            out.update(since=_format(self.since), phase=str(self.phase), gpus=self.gpus)
            if self.resizing:
                out["resizing"] = True
        return out


def totals(ledger: Ledger, now: datetime | None) -> dict[str, float]:
    """Every bucket's GPU-seconds, the open segment counted up to `now` (a reader's clock)."""
    out = {b: ledger.seconds.get(b, 0.0) for b in BUCKETS}
    if now is not None and ledger.since is not None and ledger.phase is not None:
        bucket = "resizing" if ledger.resizing else PHASE_BUCKETS.get(ledger.phase, "queued")
        out[bucket] += max(0.0, (now - ledger.since).total_seconds()) * ledger.gpus
    return out


def summary(spent: Mapping[str, float]) -> str | None:
    """`goodput 82% of 120.5 GPU-hours; lost: queued 10%, lostWork 5%, ...`; None before
    any GPU time was counted."""
    total = sum(spent.values())
    if total <= 0:
        return None
    shares = sorted(((v / total, b) for b, v in spent.items() if b != "training" and v > 0),
                    reverse=True)  # fmt: skip
    head = (
        f"goodput {100 * spent.get('training', 0.0) / total:.0f}% of {total / 3600:.1f} GPU-hours"
    )
    if not shares:
        return head
    return head + "; lost: " + ", ".join(f"{b} {100 * s:.0f}%" for s, b in shares)


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _format(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpus_of(spec: DistributedTrainingJobSpec) -> int:
    """Sum of gpus x replicas over the roles (stage groups counted one by one)."""
    total = 0
    for role in (spec.roles.worker, spec.roles.ps):
        if role is not None:
            total += role.gpus * role.replicas
    stage = spec.roles.stage
    if stage is not None:
        groups = stage.groups or []
        total += sum(g.gpus * g.replicas for g in groups) if groups else stage.gpus * stage.replicas
    return total
