"""The loss history of a job: the ConfigMap `<job>-history`, key `history.json`, that rank 0
and the operator keep (at most 512 rows; when full every other row is dropped and the
stride doubles). Pure: parsing only.

    {"columns": ["step", "loss", "accuracy", "samplesPerSecond", "lr", "time"],
     "rows": [[10, 2.1, null, 850.0, 0.05, ...], ...], "stride": 1}
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtjob_client.errors import DtjobError

HISTORY_KEY = "history.json"


def history_config_map(job: str) -> str:
    """Name of the job's history ConfigMap."""
    return f"{job}-history"


@dataclass(frozen=True)
class HistoryPoint:
    """One recorded step; None where the trainer did not know the value."""

    step: int
    loss: float | None = None
    accuracy: float | None = None
    samples_per_second: float | None = None
    lr: float | None = None
    time: float | str | None = None
    """As the trainer recorded it."""


@dataclass(frozen=True)
class History:
    """The recorded points, sorted by step, and the stride between recorded steps (1 until
    the history first filled up)."""

    points: tuple[HistoryPoint, ...] = ()
    stride: int = 1

    def __len__(self) -> int:
        return len(self.points)

    @property
    def losses(self) -> list[tuple[int, float]]:
        """(step, loss) of the points that have a finite loss."""
        return [(p.step, p.loss) for p in self.points if p.loss is not None]


_FIELDS = {
    "step": "step",
    "loss": "loss",
    "accuracy": "accuracy",
    "samplesPerSecond": "samples_per_second",
    "lr": "lr",
    "time": "time",
}


def parse_history(data: Mapping[str, str] | None, where: str = "history") -> History:
    """The history from a ConfigMap's data; empty without the key (an older job). Columns
    are read by name, so added or reordered columns do not break older clients."""
    text = (data or {}).get(HISTORY_KEY)
    if not text:
        return History()
    try:
        doc = json.loads(text)
        columns = list(doc["columns"])
        rows = doc["rows"]
        stride = int(doc.get("stride") or 1)
        points = [_point(columns, row) for row in rows]
    except (ValueError, KeyError, TypeError) as exc:
        raise DtjobError(f"{where}: key {HISTORY_KEY} is not a valid history ({exc})") from None
    return History(tuple(sorted(points, key=lambda p: p.step)), stride)


def _point(columns: list[str], row: list[Any]) -> HistoryPoint:
    values: dict[str, Any] = {}
    for column, value in zip(columns, row, strict=False):
        field = _FIELDS.get(column)
        if field is None or value is None:
            continue
        if field == "step":
            values[field] = int(value)
        elif field == "time":
            values[field] = value if isinstance(value, str) else float(value)
        else:
            number = float(value)
            values[field] = number if math.isfinite(number) else None
    if "step" not in values:
        raise ValueError(f"a row has no step: {row}")
    return HistoryPoint(**values)
