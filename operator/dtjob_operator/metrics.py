"""Prometheus metrics of the operator, on a registry of its own (no process globals)."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from dtjob_api.status import JobPhase
from dtjob_operator.job_metrics import JobGauges


class OperatorMetrics:
    """Jobs by phase, gang restarts, pods created, reconcile latency, admission, and the
    training progress of each running job (job_metrics.py)."""

    def __init__(self, job_limit: int = 1000) -> None:
        self.registry = CollectorRegistry()
        self.jobs = Gauge(
            "dtjob_jobs", "Jobs known to the operator, by phase", ["phase"], registry=self.registry
        )
        self.restarts = Counter(
            "dtjob_gang_restarts", "Gang restarts started", ["namespace"], registry=self.registry
        )
        self.stalls = Counter(
            "dtjob_gang_stalls",
            "Gang restarts because the step stood still past the progress deadline",
            ["namespace"],
            registry=self.registry,
        )
        # A node label: bounded by the cluster's nodes, and what an admin needs to act on.
        self.node_avoidances = Counter(
            "dtjob_node_avoidances",
            "Gang restarts that pointed at a node (a hardware fault, the first "
            "rank stopped in a stall): the job's next gangs keep off it for a time",
            ["namespace", "node"],
            registry=self.registry,
        )
        # Goodput (dtjob_api/goodput.py): a job's GPU time by bucket, counted when the
        # ledger closes a segment (a phase change), per namespace and Kueue queue.
        self.gpu_seconds = Counter(
            "dtjob_gpu_seconds",
            "GPU-seconds of jobs by bucket: training (goodput), queued, starting, "
            "restarting, resizing, lostWork (steps since the checkpoint), stalled",
            ["namespace", "queue", "bucket"],
            registry=self.registry,
        )
        self.suspect_nodes = Gauge(
            "dtjob_suspect_nodes",
            "Nodes every job keeps off: named by restarts of several jobs (suspectNodeJobs)",
            registry=self.registry,
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
        # Every request of the operator's API client (kopf's own watches aside), WATCH apart:
        # what the operator costs the API server (verb x resource: a bounded set).
        self.api_requests = Counter(
            "dtjob_api_requests",
            "Requests the operator's API client sent, by verb and resource",
            ["verb", "resource"],
            registry=self.registry,
        )
        # Gang admission (docs/admission.md).
        self.queued = Gauge(
            "dtjob_admission_queued_jobs",
            "Jobs waiting for admission, by namespace",
            ["namespace"],
            registry=self.registry,
        )
        self.admitted_gpus = Gauge(
            "dtjob_admission_admitted_gpus",
            "GPUs (any vendor, MIG slices) requested by the gangs of admitted jobs, by namespace",
            ["namespace"],
            registry=self.registry,
        )
        self.admission_wait_seconds = Histogram(
            "dtjob_admission_wait_seconds",
            "Time from a job's creation (or re-queue) to its admission",
            ["namespace"],
            buckets=(1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400),
            registry=self.registry,
        )
        self.admission_pass_seconds = Histogram(
            "dtjob_admission_pass_duration_seconds",
            "Time of one admission pass (gather + decide for every waiting job)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.preemptions = Counter(
            "dtjob_admission_preemptions",
            "Jobs suspended for higher-priority jobs",
            registry=self.registry,
        )
        self.pods_ready_timeouts = Counter(
            "dtjob_admission_pods_ready_timeouts",
            "Admitted gangs released because their pods were not ready in time",
            ["namespace"],
            registry=self.registry,
        )
        self.job_progress = JobGauges(self.registry, job_limit)
        self._admission_namespaces: set[str] = set()
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

    def set_admission_state(self, queued: dict[str, int], gpus: dict[str, int]) -> None:
        """Queued jobs and admitted GPUs per namespace after an admission pass; namespaces
        that dropped out are set to 0."""
        with self._lock:
            names = self._admission_namespaces | set(queued) | set(gpus)
            self._admission_namespaces = set(queued) | set(gpus)
        for ns in names:
            self.queued.labels(namespace=ns).set(queued.get(ns, 0))
            self.admitted_gpus.labels(namespace=ns).set(gpus.get(ns, 0))

    def serve(self, port: int) -> None:
        """Expose /metrics on all interfaces of the pod at `port`."""
        start_http_server(port, registry=self.registry)
