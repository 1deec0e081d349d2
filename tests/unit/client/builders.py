"""Fluent builders of the JSON the API server returns for jobs, pods, events and quotas,
so the formatting tests read like the situations they describe."""

from __future__ import annotations

import copy
from typing import Any

from dtjob_client.jobs import Job

CREATED = "2026-03-01T10:00:00Z"


class JobJson:
    """`JobJson("big", "team-a").workers(2, gpus=4).phase("Queued").build()`."""

    def __init__(self, name: str, namespace: str = "team-a", created: str = CREATED) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "dtjob.io/v1alpha1",
            "kind": "DistributedTrainingJob",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "creationTimestamp": created,
            },
            "spec": {"strategy": {"type": "DataParallel"}, "roles": {}},
            "status": {"phase": "Pending"},
        }

    def strategy(self, type_: str) -> JobJson:
        self._obj["spec"]["strategy"] = {"type": type_}
        return self

    def role(self, role: str, replicas: int, gpus: int = 0, **extra: Any) -> JobJson:
        self._obj["spec"]["roles"][role] = {"replicas": replicas, "gpus": gpus, **extra}
        return self

    def spec(self, **fields: Any) -> JobJson:
        self._obj["spec"].update(fields)
        return self

    def status(self, **fields: Any) -> JobJson:
        self._obj["status"].update(fields)
        return self

    def progress(self, **fields: Any) -> JobJson:
        self._obj["status"].setdefault("progress", {}).update(fields)
        return self

    def condition(self, type_: str, status: str, reason: str, message: str = "",
                  time: str = "2026-03-01T10:01:00Z") -> JobJson:  # fmt: skip
        self._obj["status"].setdefault("conditions", []).append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": time,
            }
        )
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def job(self) -> Job:
        return Job.from_api(self.build())


def pod(job: str, role: str, index: int, phase: str = "Running", ready: bool = True,
        generation: int = 0, **status: Any) -> dict[str, Any]:  # fmt: skip
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {
            "name": f"{job}-{role}-{index}",
            "labels": {
                "dtjob.io/job-name": job,
                "dtjob.io/role": role,
                "dtjob.io/role-index": str(index),
                "dtjob.io/generation": str(generation),
            },
        },
        "status": {"phase": phase, "conditions": conditions, **status},
    }


def event(obj: str, reason: str, message: str, type_: str = "Normal",
          time: str = "2026-03-01T10:02:00Z", count: int = 1) -> dict[str, Any]:  # fmt: skip
    return {"involvedObject": {"name": obj}, "reason": reason, "message": message,
            "type": type_, "lastTimestamp": time, "count": count}  # fmt: skip


def quota(name: str, namespace: str = "team-a", **hard_used: tuple[str, str]) -> dict[str, Any]:
    """quota("gpu-quota", gpu=("16", "12")): (hard, used) by short name: gpu is
    requests.nvidia.com/gpu, pods count/pods, cpu requests.cpu."""
    names = {"gpu": "requests.nvidia.com/gpu", "pods": "count/pods", "cpu": "requests.cpu"}
    hard = {names[k]: v[0] for k, v in hard_used.items()}
    used = {names[k]: v[1] for k, v in hard_used.items()}
    return {"metadata": {"name": name, "namespace": namespace},
            "status": {"hard": hard, "used": used}}  # fmt: skip
