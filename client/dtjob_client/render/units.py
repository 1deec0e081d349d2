"""Cell formats shared by the tables: kubectl's ages, durations, numbers, and the column
layout of its tabwriter (left-aligned, three spaces apart)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

NONE = "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns as kubectl prints them; the last column is not padded."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)] + [row[-1]]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def age(created: datetime | None, now: datetime) -> str:
    """kubectl's short age: 45s, 5m30s, 2h, 3d."""
    if created is None:
        return NONE
    return short_duration((now - created).total_seconds())


def short_duration(seconds: float) -> str:
    """45s, 5m30s, 47m, 2h5m, 30h, 3d (kubectl's HumanDuration steps)."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def eta(seconds: float | None) -> str:
    """Time left as 1h02m, 5m03s or 42s."""
    if seconds is None:
        return NONE
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def number(value: float | None, digits: int = 4) -> str:
    """Significant digits, or - when unknown."""
    return NONE if value is None else f"{value:.{digits}g}"


def rate(value: float | None) -> str:
    """Samples per second: one decimal below 100, whole numbers above."""
    if value is None:
        return NONE
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"
