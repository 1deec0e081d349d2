"""RFC 3339 timestamps as the API writes them, and back."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: object) -> datetime | None:
    """A timezone-aware datetime from an API timestamp; None when absent or malformed (a
    status written by hand must not crash the planner)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(value: datetime) -> str:
    """`2026-01-01T12:00:00Z`: the API's form, whole seconds, UTC."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds_until(moment: datetime, now: datetime) -> float:
    """Seconds from `now` to `moment`, never negative."""
    return max(0.0, (moment - now).total_seconds())
