"""Delay before a gang restart: exponential in the restart count, capped."""

from __future__ import annotations

from datetime import datetime, timedelta

from dtjob_api.spec import RunPolicy


def restart_delay(restarts: int, policy: RunPolicy) -> int:
    """Seconds to wait before starting gang `restarts` (1 for the first restart):
    backoffSeconds * 2^(restarts-1), at most maxBackoffSeconds; 0 before any restart."""
    if restarts <= 0:
        return 0
    # Cap the exponent first: 2**999 is a valid int but a pointless one.
    exponent = min(restarts - 1, 32)
    return int(min(policy.backoffSeconds * 2**exponent, policy.maxBackoffSeconds))


def restart_not_before(
    last_restart: datetime | None, restarts: int, policy: RunPolicy
) -> datetime | None:
    """When gang `restarts` may start; None when there is nothing to wait for."""
    if last_restart is None or restarts <= 0:
        return None
    return last_restart + timedelta(seconds=restart_delay(restarts, policy))
