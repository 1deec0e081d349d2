"""Prometheus metrics of the operator, on a registry of its own (no process globals)."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from dtjob_operator.api.status import JobPhase


class OperatorMetrics:
    """Jobs by phase, gang restarts, pods created and reconcile latency."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs = Gauge(
            "dtjob_jobs", "Jobs known to the operator, by phase", ["phase"], registry=self.registry
        )
        self.restarts = Counter(
            "dtjob_gang_restarts", "Gang restarts started", ["namespace"], registry=self.registry
        )
        self.pods_created = Counter(
            "dtjob_pods_created", "Pods created by the operator", registry=self.registry
        )
        self.reconcile_errors = Counter(
            "dtjob_reconcile_errors", "Reconciles that raised an error", registry=self.registry
        )
        self.reconcile_seconds = Histogram(
            "dtjob_reconcile_duration_seconds",
            "Time of one reconcile of one job",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self._phases: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def observe_phase(self, key: tuple[str, str], phase: str | None) -> None:
        """Record a job's current phase (None: the job is gone) and refresh the gauge."""
        with self._lock:
            if phase is None:
                self._phases.pop(key, None)
            else:
                self._phases[key] = phase
            counts = {p.value: 0 for p in JobPhase}
            for value in self._phases.values():
                counts[value] = counts.get(value, 0) + 1
        for value, count in counts.items():
            self.jobs.labels(phase=value).set(count)

    def serve(self, port: int) -> None:
        """Expose /metrics on all interfaces of the pod at `port`."""
        start_http_server(port, registry=self.registry)
