"""Per-job training gauges (step, loss, samples/s, total steps) from status.progress, and
the slowest straggler's slowdown from the trainer's heartbeat summary.

One series per label set (namespace, job) of every job still running, never of a finished
or deleted one, and of at most `limit` jobs: a cluster with many jobs must not give its
Prometheus an unbounded number of series. Jobs past the limit are counted in
`dtjob_job_metrics_left_out_jobs` (and said once in the log) and get their series when a
slot frees, at their next reconcile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from dtjob_api.status import TERMINAL_PHASES

log = logging.getLogger(__name__)

JobKey = tuple[str, str]
STRAGGLER_FIELD = "stragglerSlowdown"

# Gauge -> the status.progress field it shows.
PROGRESS_GAUGES = {
    "dtjob_job_step": ("step", "Optimizer steps the job's trainer has completed"),
    "dtjob_job_total_steps": ("totalSteps", "Optimizer steps the job's trainer will run"),
    "dtjob_job_loss": ("loss", "Training loss the job's trainer reported last"),
    "dtjob_job_samples_per_second": (
        "samplesPerSecond",
        "Training throughput the job's trainer reported last",
    ),
    # Not a status field: the heartbeat summary's slowest straggler (reconcile.py adds it).
    "dtjob_job_straggler_slowdown": (
        STRAGGLER_FIELD,
        "CPU time per step of the job's slowest straggling rank over the other ranks' median",
    ),
}


class JobGauges:
    """The per-job gauges of one registry; thread-safe (reconcile workers share it)."""

    def __init__(self, registry: CollectorRegistry, limit: int) -> None:
        self.limit = limit
        self.gauges = {
            name: (field, Gauge(name, doc, ["namespace", "job"], registry=registry))
            for name, (field, doc) in PROGRESS_GAUGES.items()
        }
        self.left_out = Gauge(
            "dtjob_job_metrics_left_out_jobs",
            "Running jobs without dtjob_job_* series: past DTJOB_JOB_METRICS_LIMIT",
            registry=registry,
        )
        self._exported: dict[JobKey, set[str]] = {}  # job -> gauges with a series of it
        self._waiting: set[JobKey] = set()
        self._said_full = False
        self._lock = threading.Lock()

    def observe(self, key: JobKey, phase: str | None, progress: Mapping[str, Any] | None) -> None:
        """Record a job's phase (None: it is gone) and its status.progress."""
        with self._lock:
            if phase is None or phase in {p.value for p in TERMINAL_PHASES}:
                self._drop(key)
            elif key in self._exported or len(self._exported) < self.limit:
                self._waiting.discard(key)
                self._set(key, progress or {})
            else:
                self._waiting.add(key)
                if not self._said_full:
                    self._said_full = True
                    log.warning(
                        "per-job metrics are exported for %d jobs (DTJOB_JOB_METRICS_LIMIT); "
                        "the others are counted in dtjob_job_metrics_left_out_jobs",
                        self.limit,
                    )
            self.left_out.set(len(self._waiting))

    def _set(self, key: JobKey, progress: Mapping[str, Any]) -> None:
        has = self._exported.setdefault(key, set())
        for name, (field, gauge) in self.gauges.items():
            value = progress.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                gauge.labels(*key).set(value)
                has.add(name)
            elif name in has:  # unknown now (a restarted trainer's first report): no stale value
                gauge.remove(*key)
                has.discard(name)

    def _drop(self, key: JobKey) -> None:
        self._waiting.discard(key)
        for name in self._exported.pop(key, set()):
            self.gauges[name][1].remove(*key)
