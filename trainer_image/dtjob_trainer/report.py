"""Progress from any training code to its DistributedTrainingJob's status.

    from dtjob_trainer.report import report        # or copy this file as dtjob_progress.py

    for step in range(start, total):
        loss = train_step()
        report(step=step + 1, total=total, loss=loss, epoch=epoch, samples_per_sec=rate)
    ...
    report(checkpoint=step)                         # after a checkpoint was written

`report()` does something only in the rank-0 process (RANK unset counts as rank 0) of a pod
the operator made (DTJ_PROGRESS_CONFIGMAP and KUBERNETES_SERVICE_HOST set); elsewhere it
returns at once. It keeps the latest value of every field, writes them at most every
`DTJ_PROGRESS_INTERVAL` seconds (default 5, `force=True` writes now) as the `progress.json`
key of the job's progress ConfigMap, with a merge PATCH over HTTPS authenticated by the pod's
service-account token, and never raises into the training loop: a failed write is logged
(the first, then every 10th) and the next report tries again. The operator copies the
document into the job's status.progress (STEP and LOSS in `kubectl get dtj`).

Standard library only, and one file, so that any image can carry it. Adapters for Hugging
Face Transformers (`hf_callback()`) and Lightning (`lightning_callback()`) import their
framework only when called.
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
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

PROGRESS_KEY = "progress.json"
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
}
INTEGER_FIELDS = frozenset({"step", "totalSteps", "epoch", "lastCheckpointStep"})

log = logging.getLogger(__name__)


def utc_now() -> str:
    """RFC 3339 timestamp, as Kubernetes writes them."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ConfigMapClient:
    """Merge-PATCH of the `progress.json` key of one ConfigMap through the API server."""

    def __init__(
        self,
        url: str,
        token_path: str,
        ssl_context: ssl.SSLContext | None,
        timeout: float = 5.0,
    ) -> None:
        self.url = url
        self.token_path = token_path
        self.ssl_context = ssl_context
        self.timeout = timeout

    @classmethod
    def in_cluster(
        cls,
        namespace: str,
        configmap: str,
        host: str,
        port: str | None = None,
        sa_dir: str = SERVICE_ACCOUNT_DIR,
    ) -> ConfigMapClient:
        """The client for a pod: the API server's Service address, the SA token and CA."""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        url = f"https://{host}:{port or 443}/api/v1/namespaces/{namespace}/configmaps/{configmap}"
        context = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
        return cls(url, os.path.join(sa_dir, "token"), context)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, sa_dir: str = SERVICE_ACCOUNT_DIR
    ) -> ConfigMapClient | None:
        """From the env contract (DTJ_NAMESPACE, DTJ_PROGRESS_CONFIGMAP) and the variables
        the kubelet sets (KUBERNETES_SERVICE_HOST/PORT); None outside such a pod."""
        env = os.environ if environ is None else environ
        host, configmap = env.get("KUBERNETES_SERVICE_HOST"), env.get("DTJ_PROGRESS_CONFIGMAP")
        namespace = env.get("DTJ_NAMESPACE")
        if not (host and configmap and namespace):
            return None
        return cls.in_cluster(
            namespace, configmap, host, env.get("KUBERNETES_SERVICE_PORT"), sa_dir
        )

    def write(self, body: str) -> None:
        """PATCH data["progress.json"] = body; raises on any HTTP or network error."""
        # Re-read every time: the kubelet rotates projected tokens.
        token = Path(self.token_path).read_text().strip()
        patch = json.dumps({"data": {PROGRESS_KEY: body}}).encode()
        request = urllib.request.Request(
            self.url,
            data=patch,
            method="PATCH",
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/merge-patch+json",
                "Accept": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=self.timeout, context=self.ssl_context):
            pass


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
            elif key != "message":
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


_default: Reporter | None = None
_default_lock = threading.Lock()


def default_reporter() -> Reporter:
    """The process's reporter, made from the environment on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = reporter_from_env()
        return _default


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
    force: bool = False,
) -> bool:
    """Report progress (see the module docstring); True when it was written just now.

    `checkpoint` is the step of a checkpoint just written (its time is recorded too);
    `eta_seconds` is estimated from the step rate when not given. Tensors work for numbers
    (anything float() accepts). Never raises."""
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
    }
    try:
        reporter = default_reporter()
    except Exception as exc:  # a malformed DTJ_PROGRESS_INTERVAL, say
        log.warning("progress reporting disabled: %s", exc)
        return False
    return reporter.update({FIELDS[k]: v for k, v in values.items()}, force=force)


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

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            report(step=state.global_step, checkpoint=state.global_step, force=True)

        def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            report(step=state.global_step, force=True)

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

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            report(step=trainer.global_step, checkpoint=trainer.global_step, force=True)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            report(step=trainer.global_step, force=True)

    return DtjobProgressCallback()


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
