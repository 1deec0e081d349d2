"""Parsing the `<job>-history` ConfigMap into typed points."""

from __future__ import annotations

import json

import pytest

from dtjob_client.errors import DtjobError
from dtjob_client.history import History, HistoryPoint, parse_history

COLUMNS = ["step", "loss", "accuracy", "samplesPerSecond", "lr", "time"]


def data(rows: list[list[object]], stride: int = 1, columns: list[str] = COLUMNS) -> dict[str, str]:
    return {"history.json": json.dumps({"columns": columns, "rows": rows, "stride": stride})}


def test_rows_become_typed_points_sorted_by_step() -> None:
    h = parse_history(
        data([[20, 1.5, None, 900.0, 0.05, 1700000020.5], [10, 2.0, None, 850, 0.05, 1.7e9]], 4)
    )
    assert h.stride == 4
    assert h.points == (
        HistoryPoint(10, 2.0, None, 850.0, 0.05, 1.7e9),
        HistoryPoint(20, 1.5, None, 900.0, 0.05, 1700000020.5),
    )
    assert h.losses == [(10, 2.0), (20, 1.5)]


def test_columns_are_read_by_name() -> None:
    h = parse_history(
        data([[0.9, 5, "2026-03-01T10:00:00Z", 7]], 1, ["loss", "step", "time", "new"])
    )
    assert h.points == (HistoryPoint(5, 0.9, time="2026-03-01T10:00:00Z"),)


def test_missing_configmap_data_or_key_is_an_empty_history() -> None:
    assert parse_history(None) == History()
    assert parse_history({"other": "x"}) == History()
    assert len(parse_history(None)) == 0


@pytest.mark.parametrize(
    "text", ["not json", '{"rows": []}', '{"columns": ["loss"], "rows": [[1.0]]}']
)
def test_a_broken_history_says_where(text: str) -> None:
    with pytest.raises(DtjobError, match=r"ConfigMap ns/j-history: key history\.json"):
        parse_history({"history.json": text}, where="ConfigMap ns/j-history")
