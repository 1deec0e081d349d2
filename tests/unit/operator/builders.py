"""Fluent builders of jobs and pods, as the API server returns them, for the unit tests.

job = a_job().with_strategy("DataParallel").with_workers(2, gpus=1)
pod = a_pod(job, "worker", 0).running().ready()
pod = a_pod(job, "worker", 1).failed(exit_code=137, finished_at=at(30))
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from dtjob_operator.builders import Job
from dtjob_operator.constants import (
    LABEL_GENERATION,
    LABEL_JOB_NAME,
    LABEL_ROLE,
    LABEL_ROLE_INDEX,
    TRAINER_CONTAINER,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus `seconds`: tests speak in offsets from one fixed instant."""
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    """at(seconds) in the API's RFC 3339 form."""
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


class JobBuilder:
    """A DistributedTrainingJob object (metadata, spec, status) as plain dicts."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self._obj: dict[str, Any] = {
            "apiVersion": "dtjob.io/v1alpha1",
            "kind": "DistributedTrainingJob",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "generation": 1,
                "creationTimestamp": iso(0),
            },
            "spec": {"strategy": {"type": "DataParallel"}, "roles": {}},
        }

    @property
    def spec(self) -> dict[str, Any]:
        return self._obj["spec"]

    def with_strategy(self, type_: str, **settings: Any) -> JobBuilder:
        self.spec["strategy"] = {"type": type_, **settings}
        return self

    def with_role(self, role: str, replicas: int, gpus: int = 0, **extra: Any) -> JobBuilder:
        self.spec["roles"][role] = {"replicas": replicas, "gpus": gpus, **extra}
        return self

    def with_workers(self, replicas: int, gpus: int = 0, **extra: Any) -> JobBuilder:
        return self.with_role("worker", replicas, gpus, **extra)

    def with_ps(self, replicas: int, gpus: int = 0, **extra: Any) -> JobBuilder:
        return self.with_role("ps", replicas, gpus, **extra)

    def with_stages(self, replicas: int, gpus: int = 0, **extra: Any) -> JobBuilder:
        return self.with_role("stage", replicas, gpus, **extra)

    def with_template(self, role: str, **overlay: Any) -> JobBuilder:
        self.spec["roles"][role]["template"] = overlay
        return self

    def with_run_policy(self, **policy: Any) -> JobBuilder:
        self.spec.setdefault("runPolicy", {}).update(policy)
        return self

    def with_network(self, **network: Any) -> JobBuilder:
        self.spec.setdefault("network", {}).update(network)
        return self

    def with_checkpoint(self, **checkpoint: Any) -> JobBuilder:
        self.spec.setdefault("checkpoint", {}).update(checkpoint)
        return self

    def with_trainer(self, **trainer: Any) -> JobBuilder:
        self.spec.setdefault("trainer", {}).update(trainer)
        return self

    def with_spec(self, **fields: Any) -> JobBuilder:
        self.spec.update(fields)
        return self

    def suspended(self, value: bool = True) -> JobBuilder:
        self.spec["suspend"] = value
        return self

    def with_status(self, **fields: Any) -> JobBuilder:
        self._obj.setdefault("status", {}).update(fields)
        return self

    def with_full_status(self, status: dict[str, Any]) -> JobBuilder:
        """Replace the whole status, e.g. with the one a plan computed."""
        self._obj["status"] = copy.deepcopy(status)
        return self

    def with_generation(self, generation: int) -> JobBuilder:
        self._obj["metadata"]["generation"] = generation
        return self

    def copy(self) -> JobBuilder:
        """An independent builder with the same content (tables share base jobs)."""
        twin = JobBuilder(self.name, self.namespace)
        twin._obj = copy.deepcopy(self._obj)
        return twin

    def obj(self) -> dict[str, Any]:
        """The job object, as a fresh copy."""
        return copy.deepcopy(self._obj)

    def job(self) -> Job:
        """The builders' view of the job (parsed, defaulted spec)."""
        return Job.from_object(self._obj)


def a_job(name: str = "j", namespace: str = "ns") -> JobBuilder:
    """A DataParallel job without roles; add them with with_workers() and friends."""
    return JobBuilder(name, namespace)


class PodBuilder:
    """A pod of a job as the API returns it; starts Pending with no container status."""

    def __init__(self, job: JobBuilder, role: str, index: int, generation: int) -> None:
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job.name}-{role}-{index}",
                "namespace": job.namespace,
                "uid": f"uid-{job.name}-{role}-{index}-g{generation}",
                "labels": {
                    LABEL_JOB_NAME: job.name,
                    LABEL_ROLE: role,
                    LABEL_ROLE_INDEX: str(index),
                    LABEL_GENERATION: str(generation),
                },
            },
            "status": {"phase": "Pending"},
        }

    @property
    def name(self) -> str:
        return str(self._pod["metadata"]["name"])

    @property
    def _status(self) -> dict[str, Any]:
        return self._pod["status"]

    def running(self) -> PodBuilder:
        self._status["phase"] = "Running"
        self._status["containerStatuses"] = [
            {"name": TRAINER_CONTAINER, "ready": False, "state": {"running": {}}}
        ]
        return self

    def ready(self) -> PodBuilder:
        self._status["conditions"] = [{"type": "Ready", "status": "True"}]
        for cs in self._status.get("containerStatuses", []):
            cs["ready"] = True
        return self

    def succeeded(self, finished_at: float = 60) -> PodBuilder:
        return self._terminated("Succeeded", 0, finished_at, "Completed")

    def failed(
        self,
        exit_code: int = 1,
        finished_at: float = 60,
        reason: str = "Error",
        message: str | None = None,
    ) -> PodBuilder:
        return self._terminated("Failed", exit_code, finished_at, reason, message)

    def evicted(self, message: str = "The node was low on resource: memory.") -> PodBuilder:
        """Failed without any container exit code, as after an eviction."""
        self._status.clear()
        self._status.update({"phase": "Failed", "reason": "Evicted", "message": message})
        return self

    def disrupted(self, reason: str = "EvictionByEvictionAPI") -> PodBuilder:
        """Carries DisruptionTarget=True, as the Eviction API, preemption or the taint
        manager leave it before deleting the pod."""
        conditions = self._status.setdefault("conditions", [])
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": reason})
        return self

    def waiting(
        self, reason: str, message: str = "", container: str = TRAINER_CONTAINER
    ) -> PodBuilder:
        """Pending with a container waiting for `reason` (ImagePullBackOff, ...)."""
        waiting = {"reason": reason, "message": message} if message else {"reason": reason}
        self._status["containerStatuses"] = [
            {"name": container, "ready": False, "state": {"waiting": waiting}}
        ]
        return self

    def unschedulable(self, message: str) -> PodBuilder:
        """Pending: the scheduler found no node (PodScheduled=False, Unschedulable)."""
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        self._status["conditions"] = [{**condition, "message": message}]
        return self

    def created(self, at_seconds: float) -> PodBuilder:
        """metadata.creationTimestamp (what the pods-ready timeout counts from)."""
        self._pod["metadata"]["creationTimestamp"] = iso(at_seconds)
        return self

    def on_node(self, node: str) -> PodBuilder:
        self._pod.setdefault("spec", {})["nodeName"] = node
        return self

    def terminating(self, since: float = 0) -> PodBuilder:
        self._pod["metadata"]["deletionTimestamp"] = iso(since)
        return self

    def _terminated(
        self, phase: str, code: int, finished_at: float, reason: str, message: str | None = None
    ) -> PodBuilder:
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": reason,
            "startedAt": iso(0),
            "finishedAt": iso(finished_at),
        }
        if message is not None:
            terminated["message"] = message
        self._status.clear()
        self._status.update(
            {
                "phase": phase,
                "containerStatuses": [
                    {"name": TRAINER_CONTAINER, "ready": False, "state": {"terminated": terminated}}
                ],
            }
        )
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


def a_pod(job: JobBuilder, role: str, index: int, generation: int = 0) -> PodBuilder:
    """Pod `<job>-<role>-<index>` of gang `generation`, Pending."""
    return PodBuilder(job, role, index, generation)


def pods(*builders: PodBuilder) -> list[dict[str, Any]]:
    """The objects of several pod builders."""
    return [b.obj() for b in builders]
