"""Which admission backend holds a job (seam.py): the one place that reads the operator's
admission mode and the job's Kueue queue label.

- mode "kueue": every job is Kueue's (one without the label goes to kueueDefaultQueue);
- mode "external": every job is the external backend's (labels are someone else's);
- mode "builtin" (the default): a job labelled kueue.x-k8s.io/queue-name is Kueue's, and
  so is one whose spec.managedBy is MultiKueue; any other the built-in admission's. A job
  that Kueue held (status.admission.backend) and that lost its label stays Kueue's until
  Kueue's adapter has handed it over: its gang stopped and its Workload gone, so that no
  quota is held twice and no two admissions ever hold pods of the same job
  (kueue/backend.py, `_hand_over`).

The reconcile asks `route(job)` for the backend (the one that held the job before lets go
of it), hands that backend's verdict to the planner and tells the same backend what the
pass did (`after`); it never reads the mode or the label itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dtjob_api.status import TERMINAL_PHASES, AdmissionBackendName
from dtjob_operator.admission.builtin import BuiltinBackend
from dtjob_operator.admission.controller import Reads
from dtjob_operator.admission.external import ExternalBackend
from dtjob_operator.admission.seam import AdmissionBackend, JobKey, Obj
from dtjob_operator.k8s import KubeApi
from dtjob_operator.kueue.api import KueueApi
from dtjob_operator.kueue.backend import KueueBackend
from dtjob_operator.kueue.multikueue import dispatched
from dtjob_operator.kueue.workload import queue_of
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.settings import OperatorSettings


def recorded_backend(job: Obj) -> str | None:
    """status.admission.backend: who held the job at its last status write."""
    admission = (job.get("status") or {}).get("admission")
    value = admission.get("backend") if isinstance(admission, Mapping) else None
    return str(value) if value else None


class BackendReads(Reads, Protocol):
    """What the backends read from the operator's caches (caches.py)."""

    def workloads_of(self, namespace: str, job_name: str) -> list[Obj]: ...
    def watch_workloads_if_served(self) -> None: ...


class AdmissionRouter:
    """The operator's admission backends, and which one holds each job."""

    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        metrics: OperatorMetrics,
        enqueue: Callable[[JobKey], None],
        is_leader: Callable[[], bool],
        caches: BackendReads,
    ) -> None:
        self.mode = settings.admission
        self.builtin: BuiltinBackend | None = None
        self.kueue: KueueBackend | None = None
        self.external: ExternalBackend | None = None
        if self.mode in ("builtin", "kueue"):
            self.kueue = KueueBackend(
                KueueApi(api.api_client), settings, caches.list_priority_classes,
                caches.workloads_of, caches.watch_workloads_if_served, metrics,
                emit_event=api.emit_event,
            )  # fmt: skip
        if self.mode == "builtin":
            self.builtin = BuiltinBackend(
                api, settings, metrics, enqueue, is_leader, caches,
                owns=lambda job: self.backend_of(job) is self.builtin,
            )  # fmt: skip
        if self.mode == "external":
            self.external = ExternalBackend()
        self.backends: list[AdmissionBackend] = [
            b for b in (self.builtin, self.kueue, self.external) if b is not None
        ]

    def backend_of(self, job: Obj) -> AdmissionBackend:
        """The backend that holds `job` (see the module docstring)."""
        if self.kueue is not None and self.mode == "kueue":
            return self.kueue
        if self.external is not None:
            return self.external
        assert self.builtin is not None and self.kueue is not None
        if queue_of(job) is not None or dispatched(job):  # MultiKueue is Kueue's alone
            return self.kueue
        if recorded_backend(job) == AdmissionBackendName.KUEUE:
            phase = (job.get("status") or {}).get("phase")
            if phase not in TERMINAL_PHASES:
                return self.kueue  # until Kueue's adapter has handed the job over
        return self.builtin

    def route(self, job: Obj) -> AdmissionBackend:
        """backend_of(job), and the backend that held the job before (when another) lets
        go of it: the built-in admission's reservation of a job that went to Kueue."""
        backend = self.backend_of(job)
        before = recorded_backend(job)
        for other in self.backends:
            if other is not backend and other.name == before:
                other.release(job)
        return backend

    def after(
        self,
        backend: AdmissionBackend,
        job: Obj,
        old: dict[str, Any],
        new: dict[str, Any],
        deleted_pods: bool,
    ) -> None:
        """Tell `backend` what the pass wrote; the built-in admission also counts the pods
        of jobs it does not hold on its nodes and quotas, so room they free wakes it."""
        backend.after(job, old, new, deleted_pods)
        moved = deleted_pods or old.get("phase") != new.get("phase")
        if self.builtin is not None and backend is not self.builtin and moved:
            self.builtin.request()

    def request(self) -> None:
        for backend in self.backends:
            backend.request()

    def forget(self, key: JobKey, job: Obj | None) -> None:
        for backend in self.backends:
            backend.forget(key, job)

    def start(self) -> None:
        for backend in self.backends:
            backend.start()

    def stop(self) -> None:
        for backend in self.backends:
            backend.stop()

    def clear(self) -> None:
        for backend in self.backends:
            backend.clear()
