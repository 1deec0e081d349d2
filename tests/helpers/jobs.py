"""Fluent builders and waits for DistributedTrainingJob objects in integration tests."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from helpers.kube import EXIT_CODE, wait_for

GROUP, VERSION, PLURAL = "dtjob.io", "v1alpha1", "distributedtrainingjobs"
JOB_LABEL = "dtjob.io/job-name"


class JobBuilder:
    """`JobBuilder("j").strategy("DataParallel").role("worker", 2, gpus=1).build()`."""

    def __init__(self, name: str) -> None:
        self._job: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DistributedTrainingJob",
            "metadata": {"name": name},
            "spec": {
                "strategy": {"type": "DataParallel"},
                "roles": {},
                # Divisible by every data-parallel size the tests use (1-4, 6, 8, 12, 16).
                "trainer": {"batchSize": 48},
                # Fast restarts keep lifecycle tests short.
                "runPolicy": {"backoffSeconds": 1, "maxBackoffSeconds": 2},
            },
        }

    def strategy(self, type_: str, **settings: Any) -> JobBuilder:
        self._job["spec"]["strategy"] = {"type": type_, **settings}
        return self

    def role(self, role: str, replicas: int, gpus: int = 0, **extra: Any) -> JobBuilder:
        self._job["spec"]["roles"][role] = {"replicas": replicas, "gpus": gpus, **extra}
        return self

    def run_policy(self, **policy: Any) -> JobBuilder:
        self._job["spec"]["runPolicy"].update(policy)
        return self

    def spec(self, **fields: Any) -> JobBuilder:
        self._job["spec"].update(fields)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._job)


def create_job(api: client.ApiClient, ns: str, job: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, job
    )
    return created


def get_job(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        job: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, name
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return job


def patch_job(api: client.ApiClient, ns: str, name: str, patch: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, name, patch
    )


def delete_job(api: client.ApiClient, ns: str, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


def status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    job = get_job(api, ns, name)
    return (job or {}).get("status") or {}


def wait_phase(
    api: client.ApiClient, ns: str, name: str, phase: str, timeout: float = 60
) -> dict[str, Any]:
    """Wait until the job's status.phase is `phase`; returns the status."""
    return wait_for(
        lambda: (s := status(api, ns, name)).get("phase") == phase and s,
        timeout,
        what=f"job {ns}/{name} phase {phase} (status now: {status(api, ns, name)})",
    )


def job_pods(core: client.CoreV1Api, ns: str, name: str) -> list[client.V1Pod]:
    """Pods of the job that are not being deleted, sorted by name."""
    pods = core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name}").items
    return sorted(
        (p for p in pods if p.metadata.deletion_timestamp is None), key=lambda p: p.metadata.name
    )


def wait_pods_running(
    core: client.CoreV1Api, ns: str, name: str, count: int, timeout: float = 60
) -> list[client.V1Pod]:
    def check() -> list[client.V1Pod] | None:
        pods = job_pods(core, ns, name)
        running = [p for p in pods if p.status.phase == "Running"]
        return pods if len(pods) == count and len(running) == count else None

    try:
        return wait_for(check, timeout, what=f"{count} running pods of job {ns}/{name}")
    except TimeoutError as e:
        # Say where it stopped: no pods (the operator held the gang: its status says why),
        # or pods that were not scheduled or not started.
        seen = [
            (p.metadata.name, p.status.phase, p.spec.node_name) for p in job_pods(core, ns, name)
        ]
        raise TimeoutError(
            f"{e}; pods {seen}; job status {status(core.api_client, ns, name)}"
        ) from e


def exit_pod(core: client.CoreV1Api, ns: str, pod: str, code: int) -> None:
    """Make a fake (KWOK) pod's container exit with `code`."""
    core.patch_namespaced_pod(pod, ns, {"metadata": {"annotations": {EXIT_CODE: str(code)}}})


def env_of(pod: client.V1Pod) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}
