"""ttlSecondsAfterFinished: a finished job (and, through owner references, everything it
owns) is deleted after this long."""

from __future__ import annotations

from datetime import datetime, timedelta

from dtjob_api.spec import RunPolicy


def expiry_of(completion_time: datetime | None, policy: RunPolicy) -> datetime | None:
    """When the finished job is to be deleted; None to keep it."""
    if completion_time is None or policy.ttlSecondsAfterFinished is None:
        return None
    return completion_time + timedelta(seconds=policy.ttlSecondsAfterFinished)


def ttl_expired(completion_time: datetime | None, policy: RunPolicy, now: datetime) -> bool:
    """True once the finished job's time is up."""
    expiry = expiry_of(completion_time, policy)
    return expiry is not None and now >= expiry
