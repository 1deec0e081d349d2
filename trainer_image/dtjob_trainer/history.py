"""The loss history of a run, kept by rank 0 (docs/trainer.md, "Loss history").

Every logged step becomes one JSON line of `metrics.jsonl` next to the checkpoints (step,
loss, accuracy, samplesPerSecond, lr, time in unix seconds; null where unknown), a point of
the bounded curve the SDK and `kubectl dtj plot` read from the job's history ConfigMap
(report.HistoryRecorder, written at most every DTJ_HISTORY_INTERVAL s), and, when the
`tensorboard` package is installed, TensorBoard scalars under `<checkpoint dir>/tensorboard/`.

A resumed run is one curve: `resume(k)` (k = the checkpoint's step) drops the lines after
step k that the interrupted run wrote, rebuilds the bounded curve from the lines kept, and
has TensorBoard hide its events after k (`purge_step`). Nothing here stops training: a
volume that refuses a write turns the file off with one warning; a failed ConfigMap write
is retried with the next one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import ssl
from pathlib import Path
from typing import Any

from dtjob_trainer.env import DistEnv
from dtjob_trainer.progress import ConfigMapSink, FileSink
from dtjob_trainer.report import HISTORY_COLUMNS, HISTORY_KEY, HistoryRecorder, history_row

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
# Column -> TensorBoard tag (TensorBoard's own spelling).
TENSORBOARD_TAGS = {
    "loss": "loss",
    "accuracy": "accuracy",
    "samplesPerSecond": "samples_per_second",
    "lr": "lr",
}

log = logging.getLogger(__name__)

Point = dict[str, Any]


def read_metrics(path: str | os.PathLike[str]) -> list[Point]:
    """The points of a metrics.jsonl, in file order; a line that is not a whole point
    (the last one of a run killed mid-write) is skipped."""
    try:
        return _parse(Path(path).read_bytes())[0]
    except FileNotFoundError:
        return []


def _parse(text: bytes) -> tuple[list[Point], bool]:
    """The points of metrics.jsonl's bytes, and whether every line was one (and ended)."""
    points, whole = [], not text or text.endswith(b"\n")
    for line in text.splitlines():
        try:
            point = json.loads(line)
        except ValueError:
            point = None
        if isinstance(point, dict) and isinstance(point.get("step"), int):
            points.append(point)
        else:
            whole = False
    return points, whole


class MetricsLog:
    """metrics.jsonl: appended a line at a time; rewritten only on resume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: Any = None
        self._last_line_at: int | None = None

    def resume(self, step: int) -> list[Point]:
        """Keep the points up to `step` (one increasing run of steps), drop the rest, and
        open the file for appending; returns the points kept."""
        self.close()
        try:
            found, whole = _parse(self.path.read_bytes())
        except FileNotFoundError:
            found, whole = [], True
        kept: list[Point] = []
        for point in found:
            if point["step"] <= step and (not kept or point["step"] > kept[-1]["step"]):
                kept.append(point)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if len(kept) != len(found) or not whole:
            tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
            tmp.write_text("".join(json.dumps(p) + "\n" for p in kept))
            os.replace(tmp, self.path)
            log.info("%s: the %d points after step %d dropped (resumed from there)",
                     self.path, len(found) - len(kept), step)  # fmt: skip
        self._file = open(self.path, "ab")  # noqa: SIM115 - open for the whole run
        self._last_line_at = None
        return kept

    def append(self, point: Point) -> None:
        """One line, flushed (a crash loses at most the line being written)."""
        self._last_line_at = self._file.tell()
        self._file.write((json.dumps(point) + "\n").encode())
        self._file.flush()

    def replace_last(self, point: Point) -> None:
        """Rewrite the line just appended (the final step, once its accuracy is known)."""
        if self._last_line_at is None:
            self.append(point)
            return
        self._file.truncate(self._last_line_at)
        self.append(point)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardLog:
    """Scalars for TensorBoard when the `tensorboard` package is there; nothing otherwise."""

    def __init__(self, directory: Path, purge_step: int) -> None:
        self.writer: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            log.info("tensorboard is not installed: no event files (metrics.jsonl has the curve)")
            return
        # Events at or after purge_step (left by an interrupted run) are hidden.
        self.writer = SummaryWriter(log_dir=str(directory), purge_step=purge_step)

    def add(self, point: Point) -> None:
        if self.writer is None:
            return
        for column, tag in TENSORBOARD_TAGS.items():
            if point.get(column) is not None:
                self.writer.add_scalar(tag, point[column], point["step"], walltime=point["time"])

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class TrainingHistory:
    """Rank 0's loss history: metrics.jsonl, the bounded curve and TensorBoard. Without a
    directory and a recorder (the other ranks) every call does nothing."""

    def __init__(
        self,
        directory: Path | None,
        recorder: HistoryRecorder | None,
        tensorboard: bool = True,
    ) -> None:
        self.directory = directory
        self.recorder = recorder
        self.tensorboard_on = tensorboard
        self.file: MetricsLog | None = None
        self.tensorboard: TensorBoardLog | None = None
        self.last: Point | None = None
        self._resumed = False

    @classmethod
    def disabled(cls) -> TrainingHistory:
        """The history of a rank that keeps none."""
        return cls(None, None)

    def resume(self, step: int) -> None:
        """Start (again) after `step`: the file and the curve keep the points up to it."""
        self._resumed = True
        if self.directory is None:
            return
        kept: list[Point] = []
        try:
            self.file = MetricsLog(self.directory / METRICS_FILE)
            kept = self.file.resume(step)
        except OSError as exc:
            self._file_failed(exc)
        if self.recorder is not None:
            self.recorder.rebuild(kept)
        self.last = kept[-1] if kept else None
        if self.tensorboard_on:
            try:
                self.tensorboard = TensorBoardLog(self.directory / TENSORBOARD_DIR, step + 1)
            except Exception as exc:  # TensorBoard is a convenience: never stop for it
                log.warning("TensorBoard events disabled: %s", exc)

    def record(
        self,
        step: int,
        loss: float | None,
        samples_per_second: float | None = None,
        lr: float | None = None,
        accuracy: float | None = None,
    ) -> None:
        """The point of a logged step."""
        if self.directory is None and self.recorder is None:
            return
        if not self._resumed:  # a strategy that did not say: whatever came after is stale
            self.resume(step - 1)
        row = history_row(
            {"step": step, "loss": loss, "accuracy": accuracy,
             "samplesPerSecond": samples_per_second, "lr": lr}
        )  # fmt: skip
        point = dict(zip(HISTORY_COLUMNS, row, strict=True))
        self._write(point, replace=False)
        self.last = point

    def finish(self, step: int, accuracy: float | None) -> None:
        """The run's held-out accuracy, added to its last point when that is `step`."""
        if self.last is None or self.last["step"] != step or accuracy is None:
            return
        point = {**self.last, "accuracy": float(accuracy)}
        self._write(point, replace=True)
        self.last = point

    def _write(self, point: Point, replace: bool) -> None:
        if self.file is not None:
            try:
                (self.file.replace_last if replace else self.file.append)(point)
            except OSError as exc:
                self._file_failed(exc)
        if self.recorder is not None:
            if replace:
                self.recorder.replace_last(point)
            else:
                self.recorder.add(point)
        if self.tensorboard is not None:  # a replaced point adds only its accuracy
            keep = ("step", "time", "accuracy")
            self.tensorboard.add({k: point[k] for k in keep} if replace else point)

    def _file_failed(self, exc: OSError) -> None:
        log.warning("%s disabled: %s", METRICS_FILE, exc)
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
        self.file = None

    def flush(self) -> None:
        """Write the bounded curve now (after a checkpoint, at the end)."""
        if self.recorder is not None:
            self.recorder.flush()
        if self.tensorboard is not None:
            self.tensorboard.flush()

    def close(self) -> None:
        """Flush and close everything (the process is about to exit)."""
        self.flush()
        if self.file is not None:
            self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()


def make_history(env: DistEnv) -> TrainingHistory:
    """Rank 0: metrics.jsonl in the checkpoint directory, and the curve in the history
    ConfigMap in a cluster (history.json in the checkpoint directory locally)."""
    if env.rank != 0:
        return TrainingHistory.disabled()
    sink: ConfigMapSink | FileSink | None = None
    if not env.in_cluster:
        sink = FileSink(env.checkpoint_dir, HISTORY_KEY)
    elif env.history_configmap:
        try:
            sink = ConfigMapSink.for_env(env, configmap=env.history_configmap, key=HISTORY_KEY)
        except (OSError, ssl.SSLError) as exc:
            log.warning("loss history ConfigMap disabled: cannot read the service account: %s", exc)
    recorder = HistoryRecorder(sink, env.history_interval)
    return TrainingHistory(Path(env.checkpoint_dir), recorder)
