"""activeDeadlineSeconds: a job that runs too long fails with DeadlineExceeded."""

from __future__ import annotations

from datetime import datetime, timedelta

from dtjob_api.spec import RunPolicy


def deadline_of(start_time: datetime | None, policy: RunPolicy) -> datetime | None:
    """The moment the job fails; counted from status.startTime (pods first created, reset on
    resume from suspend, as batch/v1 Jobs do), so restarts count against it. None without a
    deadline or before the job started."""
    if start_time is None or policy.activeDeadlineSeconds is None:
        return None
    return start_time + timedelta(seconds=policy.activeDeadlineSeconds)


def deadline_exceeded(start_time: datetime | None, policy: RunPolicy, now: datetime) -> bool:
    """True once the deadline has passed."""
    deadline = deadline_of(start_time, policy)
    return deadline is not None and now >= deadline
