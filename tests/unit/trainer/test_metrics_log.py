"""Rank 0's loss history on the volume (dtjob_trainer.history): one JSON line per logged
step in metrics.jsonl, cut back to the checkpoint's step on resume so the file stays one
increasing curve, the bounded curve rebuilt from it, and TensorBoard events when the
package is there (and silence but for one line when it is not)."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import pytest

from dtjob_trainer.history import (
    METRICS_FILE,
    TENSORBOARD_DIR,
    MetricsLog,
    TrainingHistory,
    read_metrics,
)
from dtjob_trainer.progress import FileSink
from dtjob_trainer.report import HISTORY_COLUMNS, HISTORY_KEY, HistoryRecorder

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


def a_history(directory: Path, tensorboard: bool = False) -> TrainingHistory:
    """Rank 0's history writing history.json next to metrics.jsonl (as a local run)."""
    recorder = HistoryRecorder(FileSink(directory, HISTORY_KEY), min_interval=0)
    return TrainingHistory(directory, recorder, tensorboard=tensorboard)


def run(directory: Path, start: int, stop: int, every: int = 5) -> TrainingHistory:
    history = a_history(directory)
    history.resume(start)
    for step in range(start + every - start % every, stop + 1, every):
        history.record(step, loss=1.0 / step, samples_per_second=100.0, lr=0.1)
    return history


def test_one_line_per_logged_step_with_every_column(tmp_path: Path) -> None:
    run(tmp_path, 0, 20).close()
    points = read_metrics(tmp_path / METRICS_FILE)
    assert [p["step"] for p in points] == [5, 10, 15, 20]
    assert list(points[0]) == list(HISTORY_COLUMNS)
    assert points[0]["loss"] == 0.2 and points[0]["lr"] == 0.1
    assert points[0]["accuracy"] is None and points[0]["time"] > 1.7e9


def test_resume_drops_the_lines_after_the_checkpoint(tmp_path: Path) -> None:
    run(tmp_path, 0, 40).close()  # a run that crashed at 40 after checkpointing at 20
    run(tmp_path, 20, 50).close()
    steps = [p["step"] for p in read_metrics(tmp_path / METRICS_FILE)]
    assert steps == [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]  # once each, in order
    assert steps == [p["step"] for p in read_metrics(_fresh(tmp_path / "b", 50))]


def _fresh(directory: Path, stop: int) -> Path:
    run(directory, 0, stop).close()
    return directory / METRICS_FILE


def test_a_line_cut_short_by_a_crash_is_dropped_on_resume(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 5, "loss": 1.0}\n{"step": 10, "lo')
    kept = MetricsLog(path).resume(10)
    assert [p["step"] for p in kept] == [5]
    assert path.read_text() == '{"step": 5, "loss": 1.0}\n'  # whole lines only


def test_the_bounded_curve_is_rebuilt_from_the_file_on_resume(tmp_path: Path) -> None:
    run(tmp_path, 0, 30).close()
    resumed = run(tmp_path, 15, 25)
    resumed.close()
    document = json.loads((tmp_path / HISTORY_KEY).read_text())
    assert [r[0] for r in document["rows"]] == [5, 10, 15, 20, 25]
    assert document["columns"] == list(HISTORY_COLUMNS)


def test_the_final_accuracy_is_added_to_the_last_line(tmp_path: Path) -> None:
    history = run(tmp_path, 0, 10)
    history.finish(10, 0.93)
    history.close()
    points = read_metrics(tmp_path / METRICS_FILE)
    assert [p["step"] for p in points] == [5, 10]  # replaced, not appended
    assert points[-1]["accuracy"] == 0.93 and points[-1]["loss"] == 0.1
    rows = json.loads((tmp_path / HISTORY_KEY).read_text())["rows"]
    assert rows[-1][:3] == [10, 0.1, 0.93]


def test_a_volume_that_refuses_writes_never_stops_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / METRICS_FILE).mkdir()  # unreadable as a file: every open fails
    history = a_history(tmp_path)
    history.resume(0)
    history.record(5, loss=1.0)
    history.close()
    assert "metrics.jsonl disabled" in caplog.text
    assert json.loads((tmp_path / HISTORY_KEY).read_text())["rows"][0][0] == 5


def test_other_ranks_keep_nothing(tmp_path: Path) -> None:
    history = TrainingHistory.disabled()
    history.resume(0)
    history.record(5, loss=1.0)
    history.close()
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(HAS_TENSORBOARD, reason="checks the run without the tensorboard package")
def test_without_tensorboard_one_info_line_and_no_event_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    history = a_history(tmp_path, tensorboard=True)
    history.resume(0)
    for step in (5, 10):
        history.record(step, loss=1.0)
    history.close()
    lines = [r for r in caplog.records if "tensorboard" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert not (tmp_path / TENSORBOARD_DIR).exists()
    assert len(read_metrics(tmp_path / METRICS_FILE)) == 2


@pytest.mark.skipif(
    not HAS_TENSORBOARD, reason="the tensorboard package is not installed (an optional extra)"
)
def test_tensorboard_scalars_and_a_resume_hides_the_interrupted_runs_events(
    tmp_path: Path,
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = a_history(tmp_path, tensorboard=True)
    first.resume(0)
    for step in (5, 10, 15, 20):
        first.record(step, loss=1.0 / step, samples_per_second=10.0, lr=0.1)
    first.close()
    second = a_history(tmp_path, tensorboard=True)
    second.resume(10)
    for step in (15, 20):
        second.record(step, loss=2.0 / step, samples_per_second=10.0, lr=0.1)
    second.close()
    events = EventAccumulator(str(tmp_path / TENSORBOARD_DIR))
    events.Reload()
    assert {"loss", "samples_per_second", "lr"} <= set(events.Tags()["scalars"])
    loss = {e.step: e.value for e in events.Scalars("loss")}
    assert loss == pytest.approx({5: 0.2, 10: 0.1, 15: 2 / 15, 20: 0.1})
