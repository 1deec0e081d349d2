"""The bounded loss curve of the progress helper (report.History, HistoryRecorder and
report_history): at most 512 rows, the whole curve from the first step at a coarser
resolution as it grows, the latest point always there, written at most every interval, and
continued (not restarted) by a restarted process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unit.trainer.test_report import Api

from dtjob_trainer import report as helper
from dtjob_trainer.report import (
    HISTORY_COLUMNS,
    HISTORY_KEY,
    History,
    HistoryRecorder,
    flush_history,
    history_from_env,
    history_row,
    report_history,
)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    """A TLS stand-in for the API server, and the env of a pod pointing at it."""
    server = Api(tmp_path)
    yield server
    server.server.shutdown()
    server.server.server_close()


def filled(n: int, capacity: int = 512) -> History:
    history = History(capacity)
    for step in range(1, n + 1):
        history.add([step, 1.0 / step, None, None, None, None])
    return history


def steps(history: History) -> list[int]:
    return [row[0] for row in history.rows]


def test_below_capacity_every_point_is_kept_in_order() -> None:
    history = filled(511)
    assert steps(history) == list(range(1, 512)) and history.stride == 1


def test_when_full_every_other_row_goes_and_the_stride_doubles() -> None:
    history = filled(512)
    # Positions 0, 2, ..., 510 stay; the newest (position 511) is kept aside as the latest.
    assert steps(history) == [*range(1, 512, 2), 512]
    assert history.stride == 2


@pytest.mark.parametrize("n", [513, 1000, 1024, 5000, 100_003])
def test_bounded_first_and_last_kept_sorted_and_evenly_spaced(n: int) -> None:
    history = filled(n)
    got = steps(history)
    assert len(got) <= 512
    assert got[0] == 1 and got[-1] == n  # the whole curve: from the first to the latest
    assert got == sorted(set(got))
    # Every kept row but the latest is on the grid of the current stride.
    grid = got[:-1] if (n - 1) % history.stride else got
    assert all((s - 1) % history.stride == 0 for s in grid)
    assert len(grid) > 256 // 2  # coarser, not emptied: at least half the room is used


def test_stride_doubles_each_time_the_rows_fill() -> None:
    # The 512th row of stride 2 is the point of index 1022 (0, 2, ..., 1022).
    assert [filled(n).stride for n in (511, 512, 1022, 1023, 2044, 2045)] == [1, 2, 2, 4, 4, 8]
    # At any size a stride's worth of the room is in use: 100,003 points in 392 rows.
    big = filled(100_003)
    assert big.stride == 256 and len(big.rows) == 392


def test_a_step_at_or_before_the_last_rewinds_the_curve() -> None:
    history = filled(10)
    history.add([6, 0.5, None, None, None, None])  # a run resumed from step 5
    assert steps(history) == [1, 2, 3, 4, 5, 6]
    assert history.rows[-1][1] == 0.5


def test_amend_last_replaces_the_newest_row() -> None:
    history = filled(512)  # the newest is held aside
    history.amend_last([512, 0.1, 0.9, None, None, None])
    assert history.rows[-1] == [512, 0.1, 0.9, None, None, None] and len(history.rows) == 257


def test_seeded_from_a_document_it_goes_on_at_the_documents_stride() -> None:
    earlier = filled(3000).document()
    history = History()
    history.seed(json.loads(json.dumps(earlier)))
    assert history.stride == earlier["stride"]
    history.add([2001, 0.25, None, None, None, None])  # resumed from the checkpoint of 2000
    got = steps(history)
    assert got[0] == 1 and got[-1] == 2001 and got == sorted(got)
    assert max(got[:-1]) <= 2000


def test_rows_are_in_column_order_with_null_for_unknown() -> None:
    row = history_row({"step": 7.0, "loss": float("nan"), "lr": "0.1", "time": 5})
    assert dict(zip(HISTORY_COLUMNS, row, strict=True)) == {
        "step": 7, "loss": None, "accuracy": None, "samplesPerSecond": None,
        "lr": 0.1, "time": 5.0,
    }  # fmt: skip
    assert history_row({"step": 1})[-1] > 1.7e9  # unix seconds, now


def test_writes_at_most_every_interval_and_the_latest_point_on_flush() -> None:
    written: list[dict[str, Any]] = []

    class Sink:
        def write(self, body: str) -> None:
            written.append(json.loads(body))

    now = [0.0]
    recorder = HistoryRecorder(Sink(), min_interval=30, clock=lambda: now[0])
    assert recorder.add({"step": 1, "loss": 2.0})  # the first is due at once
    assert not recorder.add({"step": 2, "loss": 1.5})  # within 30 s: remembered
    now[0] = 31
    assert recorder.add({"step": 3, "loss": 1.0})
    assert [r[0] for r in written[-1]["rows"]] == [1, 2, 3]
    assert not recorder.flush()  # nothing new
    recorder.add({"step": 4, "loss": 0.5})
    assert recorder.flush()
    assert written[-1]["columns"] == list(HISTORY_COLUMNS) and written[-1]["stride"] == 1
    assert written[-1]["rows"][-1][:2] == [4, 0.5]


def test_a_failed_write_is_logged_kept_and_sent_with_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    attempts: list[str] = []

    class Flaky:
        def write(self, body: str) -> None:
            attempts.append(body)
            if len(attempts) == 1:
                raise OSError("connection refused")

    recorder = HistoryRecorder(Flaky(), min_interval=0)
    assert not recorder.add({"step": 1, "loss": 1.0})
    assert recorder.failures == 1 and "history write failed" in caplog.text
    assert recorder.flush()  # still dirty: the point was not lost
    assert json.loads(attempts[-1])["rows"][0][0] == 1


def test_report_history_patches_the_history_config_map_and_continues_it(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**api.env, "DTJ_HISTORY_CONFIGMAP": "j-history", "DTJ_HISTORY_INTERVAL": "0"}
    # What an earlier run of the job wrote: steps 1..5 (the restarted one resumes at 3).
    earlier = {"columns": list(HISTORY_COLUMNS), "rows": [[s, 1.0, None, None, None, 1.0]
               for s in range(1, 6)], "stride": 1}  # fmt: skip
    api.handler.get_body = {"data": {HISTORY_KEY: json.dumps(earlier)}}
    monkeypatch.setattr(helper, "_default_history", history_from_env(env, sa_dir=api.sa_dir))

    assert report_history(step=4, loss=0.5, lr=0.01, samples_per_sec=100.0)
    patch = api.handler.requests[-1]
    assert patch["path"] == "/api/v1/namespaces/team/configmaps/j-history"
    assert list(patch["body"]["data"]) == [HISTORY_KEY]
    document = json.loads(patch["body"]["data"][HISTORY_KEY])
    assert [r[0] for r in document["rows"]] == [1, 2, 3, 4]  # continued, 4 and 5 replaced
    assert document["rows"][-1][:5] == [4, 0.5, None, 100.0, 0.01]
    assert not flush_history()  # nothing new since


def test_only_rank_zero_in_a_pod_writes_history(api: Api) -> None:
    env = {**api.env, "DTJ_HISTORY_CONFIGMAP": "j-history"}
    assert history_from_env({**env, "RANK": "1"}, sa_dir=api.sa_dir).sink is None
    assert history_from_env({"RANK": "0"}, sa_dir=api.sa_dir).sink is None  # not in a pod
