"""Progress reports from rank 0 to the job's status (docs/env-contract.md, "Progress").

In a cluster, `ConfigMapSink` merge-PATCHes `data["progress.json"]` of the ConfigMap named by
DTJ_PROGRESS_CONFIGMAP with the pod's service-account token and CA, over plain urllib (no
Kubernetes client in the trainer). Locally, `FileSink` writes progress.json in the checkpoint
directory. `ProgressReporter` throttles writes and swallows sink failures: a failed progress
write is logged and never stops training.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from dtjob_trainer.env import SERVICE_ACCOUNT_DIR, DistEnv

PROGRESS_KEY = "progress.json"
DEFAULT_MIN_INTERVAL = 5.0

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
    updateTime: str | None = None

    def to_json(self) -> str:
        """Compact JSON without unset fields."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})


def utc_now() -> str:
    """RFC 3339 timestamp, as Kubernetes writes them."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ProgressSink(Protocol):
    """Where progress goes."""

    def write(self, body: str) -> None:
        """Deliver one progress JSON document (may raise)."""


class FileSink:
    """progress.json in a local directory, replaced atomically."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / PROGRESS_KEY

    def write(self, body: str) -> None:
        """Write the document."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{PROGRESS_KEY}.tmp-{os.getpid()}")
        tmp.write_text(body)
        os.replace(tmp, self.path)


class ConfigMapSink:
    """Merge-PATCH of one key of the job's progress ConfigMap through the API server."""

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
    def in_cluster(cls, env: DistEnv, sa_dir: str = SERVICE_ACCOUNT_DIR) -> ConfigMapSink:
        """The sink for a pod: API server from KUBERNETES_SERVICE_HOST/PORT, SA token + CA."""
        host = env.kubernetes_host or ""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        url = (
            f"https://{host}:{env.kubernetes_port or 443}/api/v1/namespaces/{env.namespace}"
            f"/configmaps/{env.progress_configmap}"
        )
        context = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
        return cls(url, os.path.join(sa_dir, "token"), context)

    def write(self, body: str) -> None:
        """PATCH data["progress.json"]; raises on any HTTP or network error."""
        # The token is re-read every time: kubelet rotates projected tokens.
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

    def update(self, force: bool = False, **fields: object) -> None:
        """Merge `fields` into the current progress; write it when due (or forced)."""
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
            return ProgressReporter(ConfigMapSink.in_cluster(env))
        except (OSError, ssl.SSLError) as exc:
            log.warning("progress reporting disabled: cannot read the service account: %s", exc)
            return ProgressReporter(None)
    if local_dir:
        return ProgressReporter(FileSink(local_dir))
    return ProgressReporter(None)
