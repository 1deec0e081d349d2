"""Progress reports from rank 0 to the job's status (docs/env-contract.md, "Progress").

In a cluster, `ConfigMapSink` merge-PATCHes `data["progress.json"]` of the ConfigMap named by
DTJ_PROGRESS_CONFIGMAP with the pod's service-account token and CA, over plain urllib (no
Kubernetes client in the trainer): the client of the progress helper any code can use
(report.py), so the bundled trainer and custom code write the same way. Locally, `FileSink`
writes progress.json in the checkpoint directory. `ProgressReporter` throttles writes and
swallows sink failures: a failed progress write is logged and never stops training. Rank 0's
heartbeat thread (heartbeat.py) updates it too, with `ranks` and `activity`, also while the
main thread is stuck in a collective: `updateTime` says when the document was written,
`step` whether training moved.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from dtjob_trainer.env import SERVICE_ACCOUNT_DIR, DistEnv
from dtjob_trainer.report import DEFAULT_MIN_INTERVAL, PROGRESS_KEY, ConfigMapClient, utc_now

__all__ = ["PROGRESS_KEY", "ConfigMapSink", "FileSink", "Progress", "ProgressReporter", "utc_now"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """The status.progress fields, camelCase as they appear in the job's status."""

    step: int = 0
    totalSteps: int = 0
    epoch: int = 0
    loss: float | None = None
    samplesPerSecond: float | None = None
    etaSeconds: float | None = None
    lastCheckpointStep: int | None = None
    lastCheckpointTime: str | None = None
    accuracy: float | None = None
    message: str | None = None
    activity: str | None = None
    """training, checkpointing or evaluating (heartbeat.TRAINING ...): what rank 0 does."""
    ranks: dict[str, Any] | None = None
    """Every rank's heartbeat in brief (heartbeat.summarize_ranks)."""
    updateTime: str | None = None

    def to_json(self) -> str:
        """Compact JSON without unset fields."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})


class ProgressSink(Protocol):
    """Where progress goes."""

    def write(self, body: str) -> None:
        """Deliver one progress JSON document (may raise)."""


class FileSink:
    """progress.json (or another `name`) in a local directory, replaced atomically."""

    def __init__(self, directory: str | os.PathLike[str], name: str = PROGRESS_KEY) -> None:
        self.path = Path(directory) / name

    def write(self, body: str) -> None:
        """Write the document."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        tmp.write_text(body)
        os.replace(tmp, self.path)


class ConfigMapSink(ConfigMapClient):
    """Merge-PATCH of one key of the job's progress ConfigMap through the API server: the
    progress helper's client (report.py), built from the trainer's parsed env."""

    @classmethod
    def for_env(
        cls,
        env: DistEnv,
        sa_dir: str = SERVICE_ACCOUNT_DIR,
        configmap: str | None = None,
        key: str = PROGRESS_KEY,
    ) -> ConfigMapSink:
        """The sink for a pod: API server from KUBERNETES_SERVICE_HOST/PORT, SA token + CA;
        the progress ConfigMap unless `configmap` (and its `key`) is given."""
        client = ConfigMapClient.in_cluster(
            env.namespace,
            configmap or env.progress_configmap or "",
            env.kubernetes_host or "",
            env.kubernetes_port,
            sa_dir,
            key,
        )
        return cls(client.url, client.token_path, client.ssl_context, client.timeout, key)


class ProgressReporter:
    """Throttled progress on rank 0; other ranks get one without a sink (no-op)."""

    def __init__(
        self,
        sink: ProgressSink | None,
        min_interval: float = DEFAULT_MIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.min_interval = min_interval
        self.current = Progress()
        self._last_write = float("-inf")
        self._failures = 0
        self._clock = clock
        # The training loop and rank 0's heartbeat thread both update; a write holds the
        # lock, so documents are written in the order they were made.
        self._lock = threading.Lock()

    def remember(self, **fields: object) -> None:
        """Merge `fields` without writing: the next write carries them."""
        with self._lock:
            self.current = replace(self.current, **fields)  # type: ignore[arg-type]

    def update(self, force: bool = False, **fields: object) -> None:
        """Merge `fields` into the current progress; write it when due (or forced)."""
        with self._lock:
            self.current = replace(self.current, **fields)  # type: ignore[arg-type]
            if self.sink is None:
                return
            now = self._clock()
            if not force and now - self._last_write < self.min_interval:
                return
            self._last_write = now
            body = replace(self.current, updateTime=utc_now()).to_json()
            try:
                self.sink.write(body)
                self._failures = 0
            except Exception as exc:
                self._failures += 1
                # Log the first failure and then every 10th, so a dead API server does not
                # flood the log.
                if self._failures == 1 or self._failures % 10 == 0:
                    log.warning("progress report failed (%d in a row): %s", self._failures, exc)


def make_reporter(env: DistEnv, local_dir: str | None) -> ProgressReporter:
    """Rank 0: the ConfigMap sink in a cluster, else a file in `local_dir` (or none)."""
    if env.rank != 0:
        return ProgressReporter(None)
    if env.in_cluster:
        try:
            return ProgressReporter(ConfigMapSink.for_env(env))
        except (OSError, ssl.SSLError) as exc:
            log.warning("progress reporting disabled: cannot read the service account: %s", exc)
            return ProgressReporter(None)
    if local_dir:
        return ProgressReporter(FileSink(local_dir))
    return ProgressReporter(None)
