"""Progress from any training code to its DistributedTrainingJob's status.

    from dtjob_trainer.report import report        # or copy this file as dtjob_progress.py

    for step in range(start, total):
        loss = train_step()
        report(step=step + 1, total=total, loss=loss, epoch=epoch, samples_per_sec=rate)
    ...
    report(checkpoint=step)                         # after a checkpoint was written
    report_history(step=step + 1, loss=loss, lr=lr) # a point of the loss curve
    flush_history()                                 # at the end (and after a checkpoint)
    heartbeat(step + 1)                             # on EVERY rank, after each step

`report()` does something only in the rank-0 process (RANK unset counts as rank 0) of a pod
the operator made (DTJ_PROGRESS_CONFIGMAP and KUBERNETES_SERVICE_HOST set); elsewhere it
returns at once. It keeps the latest value of every field, writes them at most every
`DTJ_PROGRESS_INTERVAL` seconds (default 5, `force=True` writes now) as the `progress.json`
key of the job's progress ConfigMap, with a merge PATCH over HTTPS authenticated by the pod's
service-account token, and never raises into the training loop: a failed write is logged
(the first, then every 10th) and the next report tries again. The operator copies the
document into the job's status.progress (STEP and LOSS in `kubectl get dtj`).

`report_history()` adds a point to the job's loss curve: a bounded series (at most 512 rows;
when full, every other row goes and `stride` doubles, so the curve from the first step stays
whole at a coarser resolution) written as the `history.json` key of the ConfigMap named by
DTJ_HISTORY_CONFIGMAP at most every `DTJ_HISTORY_INTERVAL` seconds (default 30). A restarted
process continues the curve it finds there, dropping the points at and after its first step.

`heartbeat(step)`, called on every rank after each step, records the step in memory (no I/O)
and starts, on first use, a daemon thread that publishes the rank's step, the time of its
last step and its recent step times every `DTJ_HEARTBEAT_SECONDS` (default 10) through
torch.distributed's rendezvous store; rank 0's thread adds every rank's summary to the
progress as `ranks` (the rank that stopped first, persistent stragglers). It needs torch
with an initialised process group (looked up by the thread, so the call may come first);
without one, rank 0 reports its own timing only. `report(activity="checkpointing")` (or
"evaluating", then "training" again) tells the operator not to count that pause as a
stall. The machinery is heartbeat.py of this package: an image that copies this file copies
that one beside it as `dtjob_heartbeat.py`; without it `heartbeat()` does nothing.

Standard library only, and one file, so that any image can carry it (which is why it is
longer than the house's other modules: splitting it would make users copy several).
Adapters for Hugging Face Transformers (`hf_callback()`) and Lightning
(`lightning_callback()`) import their framework only when called.
"""

from __future__ import annotations

import json
import logging
import math
import os
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

PROGRESS_KEY = "progress.json"
HISTORY_KEY = "history.json"
HISTORY_COLUMNS = ("step", "loss", "accuracy", "samplesPerSecond", "lr", "time")
HISTORY_ROWS = 512
DEFAULT_HISTORY_INTERVAL = 30.0
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_MIN_INTERVAL = 5.0
# report() keyword -> status.progress field.
FIELDS = {
    "step": "step",
    "total": "totalSteps",
    "epoch": "epoch",
    "loss": "loss",
    "samples_per_sec": "samplesPerSecond",
    "eta_seconds": "etaSeconds",
    "accuracy": "accuracy",
    "message": "message",
    "checkpoint": "lastCheckpointStep",
    "activity": "activity",
}
INTEGER_FIELDS = frozenset({"step", "totalSteps", "epoch", "lastCheckpointStep"})
# Kept as given: text, and the heartbeat's summary of the ranks.
VERBATIM_FIELDS = frozenset({"message", "activity", "ranks"})

log = logging.getLogger(__name__)


def utc_now() -> str:
    """RFC 3339 timestamp, as Kubernetes writes them."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ConfigMapClient:
    """Merge-PATCH (and GET) of one key of one ConfigMap through the API server."""

    def __init__(
        self,
        url: str,
        token_path: str,
        ssl_context: ssl.SSLContext | None,
        timeout: float = 5.0,
        key: str = PROGRESS_KEY,
    ) -> None:
        self.url = url
        self.token_path = token_path
        self.ssl_context = ssl_context
        self.timeout = timeout
        self.key = key

    @classmethod
    def in_cluster(
        cls,
        namespace: str,
        configmap: str,
        host: str,
        port: str | None = None,
        sa_dir: str = SERVICE_ACCOUNT_DIR,
        key: str = PROGRESS_KEY,
    ) -> ConfigMapClient:
        """The client for a pod: the API server's Service address, the SA token and CA."""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        url = f"https://{host}:{port or 443}/api/v1/namespaces/{namespace}/configmaps/{configmap}"
        context = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
        return cls(url, os.path.join(sa_dir, "token"), context, key=key)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        sa_dir: str = SERVICE_ACCOUNT_DIR,
        variable: str = "DTJ_PROGRESS_CONFIGMAP",
        key: str = PROGRESS_KEY,
    ) -> ConfigMapClient | None:
        """From the env contract (DTJ_NAMESPACE, the ConfigMap's `variable`) and the
        variables the kubelet sets (KUBERNETES_SERVICE_HOST/PORT); None outside such a pod."""
        env = os.environ if environ is None else environ
        host, configmap = env.get("KUBERNETES_SERVICE_HOST"), env.get(variable)
        namespace = env.get("DTJ_NAMESPACE")
        if not (host and configmap and namespace):
            return None
        port = env.get("KUBERNETES_SERVICE_PORT")
        return cls.in_cluster(namespace, configmap, host, port, sa_dir, key)

    def write(self, body: str) -> None:
        """PATCH data[key] = body; raises on any HTTP or network error."""
        patch = json.dumps({"data": {self.key: body}}).encode()
        self._call("PATCH", patch)

    def read(self) -> str | None:
        """GET data[key] (None when the key is not there); raises like write()."""
        data = json.loads(self._call("GET", None)).get("data") or {}
        value = data.get(self.key)
        return value if isinstance(value, str) else None

    def _call(self, method: str, body: bytes | None) -> bytes:
        # Re-read every time: the kubelet rotates projected tokens.
        token = Path(self.token_path).read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json"
        request = urllib.request.Request(self.url, data=body, method=method, headers=headers)
        with urllib.request.urlopen(
            request, timeout=self.timeout, context=self.ssl_context
        ) as response:
            answer: bytes = response.read()
            return answer


class Sink(Protocol):
    """Anything with write(body: str) that may raise: ConfigMapClient, a file, a test."""

    def write(self, body: str) -> None:
        """Deliver one progress JSON document (may raise)."""


class Reporter:
    """The latest progress, written through `sink` at most every `min_interval` seconds.

    Thread-safe; a reporter without a sink (not rank 0, not in a pod) only remembers."""

    def __init__(
        self,
        sink: Sink | None,
        min_interval: float = DEFAULT_MIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.min_interval = min_interval
        self.fields: dict[str, Any] = {}
        self.failures = 0
        self._clock = clock
        self._last_write = float("-inf")
        self._rate_start: tuple[float, int] | None = None
        self._lock = threading.Lock()

    def update(self, fields: Mapping[str, Any], force: bool = False) -> bool:
        """Merge status.progress `fields` (None leaves a field as it was) and write when
        due; True when a write was made and succeeded. Never raises."""
        try:
            with self._lock:
                self._merge(fields)
                if self.sink is None:
                    return False
                now = self._clock()
                if not force and now - self._last_write < self.min_interval:
                    return False
                self._last_write = now
                body = json.dumps({**self.fields, "updateTime": utc_now()})
            self.sink.write(body)
        except Exception as exc:
            self.failures += 1
            # The first failure and every 10th: a dead API server must not flood the log.
            if self.failures == 1 or self.failures % 10 == 0:
                log.warning("progress report failed (%d in a row): %s", self.failures, exc)
            return False
        self.failures = 0
        return True

    def _merge(self, fields: Mapping[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                continue
            if isinstance(value, float) and not math.isfinite(value):
                continue  # NaN/inf are not JSON; keep the last good value
            if key in INTEGER_FIELDS:
                value = int(value)
            elif key not in VERBATIM_FIELDS:
                value = float(value)
            self.fields[key] = value
        if "lastCheckpointStep" in fields and fields["lastCheckpointStep"] is not None:
            self.fields["lastCheckpointTime"] = utc_now()
        if "etaSeconds" not in fields or fields["etaSeconds"] is None:
            self._estimate_eta()

    def _estimate_eta(self) -> None:
        # From the step rate since the first report: steps left / steps per second.
        step, total = self.fields.get("step"), self.fields.get("totalSteps")
        if step is None:
            return
        now = self._clock()
        if self._rate_start is None or step < self._rate_start[1]:
            self._rate_start = (now, step)
            return
        started, first = self._rate_start
        if total is not None and step > first and now > started:
            self.fields["etaSeconds"] = round(
                max(0, total - step) * (now - started) / (step - first), 1
            )


class History:
    """A loss curve in at most `capacity` rows, like a decimating recorder: a point is kept
    when its index (the count of points added before it) is a multiple of `stride`; when
    the rows are full every other one goes and `stride` doubles. The first point and the
    latest (held aside while it is off the grid) are always there. A point at or before
    the last step rewinds the curve to before it (a run resumed from a checkpoint)."""

    def __init__(self, capacity: int = HISTORY_ROWS) -> None:
        if capacity < 2:
            raise ValueError("a history needs room for at least 2 rows")
        self.capacity = capacity
        self.stride = 1
        self.kept: list[list[Any]] = []
        self.latest: list[Any] | None = None  # the newest point, when it is not in `kept`
        self._count = 0

    def add(self, row: list[Any]) -> None:
        """Append one row (in HISTORY_COLUMNS order, step first)."""
        newest = self.latest or (self.kept[-1] if self.kept else None)
        if newest is not None and row[0] <= newest[0]:
            self.rewind(row[0])
        if self._count % self.stride:
            self.latest = row
        else:
            self.kept.append(row)
            self.latest = None
            if len(self.kept) >= self.capacity:
                self.kept, dropped = self.kept[::2], self.kept[-1]
                self.stride *= 2
                self.latest = dropped if self.kept[-1] is not dropped else None
        self._count += 1

    def amend_last(self, row: list[Any]) -> None:
        """Replace the newest row (same step; e.g. with the final accuracy)."""
        if self.latest is not None:
            self.latest = row
        elif self.kept:
            self.kept[-1] = row

    def rewind(self, step: int) -> None:
        """Forget the rows at and after `step`."""
        self.kept = [r for r in self.kept if r[0] < step]
        if self.latest is not None and self.latest[0] >= step:
            self.latest = None
        self._count = len(self.kept) * self.stride

    def seed(self, document: Mapping[str, Any]) -> None:
        """Continue a curve written before (a restarted process): its rows and stride."""
        columns = document.get("columns") or list(HISTORY_COLUMNS)
        rows = [r for r in document.get("rows") or () if isinstance(r, list)]
        self.kept = [
            [dict(zip(columns, r, strict=False)).get(c) for c in HISTORY_COLUMNS] for r in rows
        ]
        self.kept = [r for r in self.kept if isinstance(r[0], int | float)]
        self.stride = max(1, int(document.get("stride") or 1))
        self.latest = None
        while len(self.kept) >= self.capacity:
            self.kept, self.stride = self.kept[::2], self.stride * 2
        self._count = len(self.kept) * self.stride

    @property
    def rows(self) -> list[list[Any]]:
        """The rows in step order."""
        return self.kept + ([self.latest] if self.latest is not None else [])

    def document(self) -> dict[str, Any]:
        """The `history.json` document."""
        return {"columns": list(HISTORY_COLUMNS), "rows": self.rows, "stride": self.stride}


def history_row(point: Mapping[str, Any]) -> list[Any]:
    """A row in HISTORY_COLUMNS order from a point keyed by column name: the step an int,
    numbers floats, NaN and infinity null, `time` now (unix seconds) unless given."""
    row: list[Any] = [int(point["step"])]
    for column in HISTORY_COLUMNS[1:]:
        value = point.get(column)
        if column == "time" and value is None:
            value = round(time.time(), 3)
        try:
            value = float(value) if value is not None else None
        except (TypeError, ValueError):
            value = None
        row.append(value if value is None or math.isfinite(value) else None)
    return row


class HistoryRecorder:
    """The job's loss curve, written through `sink` at most every `min_interval` seconds.

    `load()` (the history ConfigMap's GET in a pod) is read before the first point, so a
    restarted process continues the curve; thread-safe; never raises."""

    def __init__(
        self,
        sink: Sink | None,
        min_interval: float = DEFAULT_HISTORY_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        capacity: int = HISTORY_ROWS,
        load: Callable[[], str | None] | None = None,
    ) -> None:
        self.sink = sink
        self.min_interval = min_interval
        self.history = History(capacity)
        self.failures = 0
        self._clock = clock
        self._load = load
        self._last_write = float("-inf")
        self._dirty = False
        self._lock = threading.Lock()

    def add(self, point: Mapping[str, Any], force: bool = False) -> bool:
        """Add one point (keys of HISTORY_COLUMNS; `step` required) and write when due;
        True when a write was made and succeeded."""
        try:
            row = history_row(point)
            with self._lock:
                self._seed()
                self.history.add(row)
                self._dirty = True
        except Exception as exc:  # a point without a step, say: the curve goes on without it
            log.warning("history point %r not recorded: %s", dict(point), exc)
            return False
        return self.flush() if force else self._write(due_only=True)

    def replace_last(self, point: Mapping[str, Any]) -> None:
        """Replace the newest point (same step), written with the next write."""
        with self._lock:
            self.history.amend_last(history_row(point))
            self._dirty = True

    def rebuild(self, points: Iterable[Mapping[str, Any]]) -> None:
        """Start over from `points` (the bundled trainer's metrics.jsonl on resume)."""
        with self._lock:
            self._load = None
            self.history = History(self.history.capacity)
            for point in points:
                self.history.add(history_row(point))
            self._dirty = True

    def flush(self) -> bool:
        """Write now if anything was added since the last write."""
        return self._write(due_only=False)

    def _seed(self) -> None:
        load, self._load = self._load, None
        if load is None:
            return
        try:
            if text := load():
                document = json.loads(text)
                if isinstance(document, dict):
                    self.history.seed(document)
        except Exception as exc:  # start a new curve rather than stop
            log.warning("could not read the earlier loss history: %s", exc)

    def _write(self, due_only: bool) -> bool:
        try:
            with self._lock:
                if self.sink is None or not self._dirty:
                    return False
                now = self._clock()
                if due_only and now - self._last_write < self.min_interval:
                    return False
                self._last_write, self._dirty = now, False
                body = json.dumps(self.history.document(), separators=(",", ":"))
            self.sink.write(body)
        except Exception as exc:
            with self._lock:
                self._dirty = True  # the next write sends it
            self.failures += 1
            if self.failures == 1 or self.failures % 10 == 0:
                log.warning("history write failed (%d in a row): %s", self.failures, exc)
            return False
        self.failures = 0
        return True


def is_rank_zero(environ: Mapping[str, str] | None = None) -> bool:
    """RANK is 0 or unset (a single process)."""
    env = os.environ if environ is None else environ
    return env.get("RANK", "0").strip() in ("", "0")


def reporter_from_env(
    environ: Mapping[str, str] | None = None, sa_dir: str = SERVICE_ACCOUNT_DIR
) -> Reporter:
    """Rank 0 in a pod: a reporter writing the job's ConfigMap; otherwise one that only
    remembers (so report() costs nothing on the other ranks and outside a cluster)."""
    env = os.environ if environ is None else environ
    interval = float(env.get("DTJ_PROGRESS_INTERVAL") or DEFAULT_MIN_INTERVAL)
    if not is_rank_zero(env):
        return Reporter(None, interval)
    try:
        return Reporter(ConfigMapClient.from_env(env, sa_dir), interval)
    except (OSError, ssl.SSLError) as exc:
        log.warning("progress reporting disabled: cannot read the service account: %s", exc)
        return Reporter(None, interval)


def history_from_env(
    environ: Mapping[str, str] | None = None, sa_dir: str = SERVICE_ACCOUNT_DIR
) -> HistoryRecorder:
    """Rank 0 in a pod: a recorder writing the job's history ConfigMap (continuing the
    curve already there); otherwise one that only remembers."""
    env = os.environ if environ is None else environ
    interval = float(env.get("DTJ_HISTORY_INTERVAL") or DEFAULT_HISTORY_INTERVAL)
    if not is_rank_zero(env):
        return HistoryRecorder(None, interval)
    try:
        client = ConfigMapClient.from_env(env, sa_dir, "DTJ_HISTORY_CONFIGMAP", HISTORY_KEY)
    except (OSError, ssl.SSLError) as exc:
        log.warning("loss history disabled: cannot read the service account: %s", exc)
        return HistoryRecorder(None, interval)
    return HistoryRecorder(client, interval, load=client.read if client else None)


_default: Reporter | None = None
_default_history: HistoryRecorder | None = None
_default_lock = threading.Lock()


def default_reporter() -> Reporter:
    """The process's reporter, made from the environment on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = reporter_from_env()
        return _default


def default_history() -> HistoryRecorder:
    """The process's history recorder, made from the environment on first use."""
    global _default_history
    with _default_lock:
        if _default_history is None:
            _default_history = history_from_env()
        return _default_history


def report(
    *,
    step: int | None = None,
    total: int | None = None,
    loss: float | None = None,
    epoch: int | None = None,
    samples_per_sec: float | None = None,
    checkpoint: int | None = None,
    accuracy: float | None = None,
    eta_seconds: float | None = None,
    message: str | None = None,
    activity: str | None = None,
    force: bool = False,
) -> bool:
    """Report progress (see the module docstring); True when it was written just now.

    `checkpoint` is the step of a checkpoint just written (its time is recorded too);
    `eta_seconds` is estimated from the step rate when not given; `activity` is
    "training", "checkpointing" or "evaluating". Tensors work for numbers (anything
    float() accepts). Never raises."""
    values = {
        "step": step,
        "total": total,
        "loss": loss,
        "epoch": epoch,
        "samples_per_sec": samples_per_sec,
        "checkpoint": checkpoint,
        "accuracy": accuracy,
        "eta_seconds": eta_seconds,
        "message": message,
        "activity": activity,
    }
    if activity is not None and _default_heartbeat not in (None, False):
        _default_heartbeat.set_activity(activity)  # its pause is not idle time
    try:
        reporter = default_reporter()
    except Exception as exc:  # a malformed DTJ_PROGRESS_INTERVAL, say
        log.warning("progress reporting disabled: %s", exc)
        return False
    return reporter.update({FIELDS[k]: v for k, v in values.items()}, force=force)


def report_history(
    *,
    step: int,
    loss: float | None = None,
    accuracy: float | None = None,
    samples_per_sec: float | None = None,
    lr: float | None = None,
    force: bool = False,
) -> bool:
    """Add a point to the job's loss curve (see the module docstring); True when the curve
    was written just now (at most every DTJ_HISTORY_INTERVAL s; `force` writes now). A
    step at or before the last one replaces the points from there on. Never raises."""
    point = {"step": step, "loss": loss, "accuracy": accuracy, "lr": lr}
    point["samplesPerSecond"] = samples_per_sec
    try:
        recorder = default_history()
    except Exception as exc:  # a malformed DTJ_HISTORY_INTERVAL, say
        log.warning("loss history disabled: %s", exc)
        return False
    return recorder.add(point, force=force)


def flush_history() -> bool:
    """Write the loss curve now if it has new points: at the end of training and after a
    checkpoint (a SIGTERM may follow). Never raises."""
    try:
        return default_history().flush()
    except Exception as exc:
        log.warning("loss history disabled: %s", exc)
        return False


# The process's heartbeat: None before the first call, False where none can run.
_default_heartbeat: Any = None


def heartbeat(step: int) -> None:
    """Record that this rank has completed `step` steps: call it on every rank after each
    step (see the module docstring). Costs a few assignments; never raises."""
    global _default_heartbeat
    if _default_heartbeat is None:
        with _default_lock:
            if _default_heartbeat is None:
                _default_heartbeat = _start_heartbeat(os.environ)
    if _default_heartbeat is not False:
        _default_heartbeat.beat(step)


def _start_heartbeat(env: Mapping[str, str]) -> Any:
    try:
        from dtjob_trainer import heartbeat as module
    except ImportError:
        try:
            import dtjob_heartbeat as module  # type: ignore[import-not-found, no-redef]
        except ImportError:
            log.warning("heartbeats disabled: heartbeat.py (dtjob_heartbeat.py) not found")
            return False
    try:
        rank = int(env.get("RANK") or 0)
        stall = env.get("DTJ_STALL_DUMP_SECONDS")

        def report_ranks(summary: dict[str, Any]) -> None:
            default_reporter().update({"ranks": summary})

        return module.start_heartbeat(
            rank,
            int(env.get("WORLD_SIZE") or 1),
            float(env.get("DTJ_HEARTBEAT_SECONDS") or module.DEFAULT_HEARTBEAT_SECONDS),
            on_summary=report_ranks if rank == 0 else None,
            stall_dump_seconds=float(stall) if stall else None,
        )
    except Exception as exc:  # a malformed RANK or interval: train on without heartbeats
        log.warning("heartbeats disabled: %s", exc)
        return False


# --- framework adapters: their framework is imported only when they are called ------------


def hf_callback(base: type | None = None) -> Any:
    """A transformers.TrainerCallback that reports step, total, epoch, loss and checkpoints:
    `Trainer(..., callbacks=[hf_callback()])`. `base` replaces TrainerCallback (tests)."""
    if base is None:
        from transformers import TrainerCallback  # type: ignore[import-not-found]

        base = TrainerCallback

    class DtjobProgressCallback(base):  # type: ignore[misc, valid-type]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            logs = logs or {}
            report(
                step=state.global_step,
                total=state.max_steps or None,
                epoch=int(state.epoch or 0),
                loss=logs.get("loss"),
                samples_per_sec=logs.get("train_samples_per_second"),
            )
            if logs.get("loss") is not None:
                report_history(
                    step=state.global_step, loss=logs["loss"], lr=logs.get("learning_rate")
                )

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            report(step=state.global_step, checkpoint=state.global_step, force=True)
            flush_history()

        def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            report(step=state.global_step, force=True)
            flush_history()

    return DtjobProgressCallback()


def lightning_callback(base: type | None = None) -> Any:
    """A Lightning Callback that reports step, total, epoch, loss and checkpoints:
    `Trainer(callbacks=[lightning_callback()])`. `base` replaces lightning's Callback."""
    if base is None:
        try:
            from lightning.pytorch import Callback  # type: ignore[import-not-found]
        except ImportError:
            from pytorch_lightning import Callback  # type: ignore[import-not-found]
        base = Callback

    class DtjobProgressCallback(base):  # type: ignore[misc, valid-type]
        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
            total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
            report(
                step=trainer.global_step,
                total=total or getattr(trainer, "estimated_stepping_batches", None),
                epoch=trainer.current_epoch,
                loss=_number(loss),
            )
            if _number(loss) is not None:
                report_history(step=trainer.global_step, loss=_number(loss))

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            report(step=trainer.global_step, checkpoint=trainer.global_step, force=True)
            flush_history()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            report(step=trainer.global_step, force=True)
            flush_history()

    return DtjobProgressCallback()


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
