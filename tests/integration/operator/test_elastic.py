"""Elastic jobs on the real control plane (issue 29), fake GPU nodes: a job is admitted at
the most workers in [minReplicas, replicas] that fit, its gang created at that size with
the matching WORLD_SIZE and the size in status.elastic; a job whose minimum does not fit
waits, saying the minimum's numbers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from helpers.jobs import JobBuilder, create_job, env_of, job_pods, status, wait_phase
from helpers.kube import wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


@pytest.fixture(scope="module")
def operator(cluster, crd, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:t", "DTJOB_RESYNC_SECONDS": "2"}
    proc = OperatorProcess(cluster.kubeconfig, log, env)
    proc.start()
    yield proc
    proc.stop()


def gpu_pods(core: Any) -> list[str]:
    pods = core.list_pod_for_all_namespaces(field_selector=UNFINISHED).items
    return [
        p.metadata.name for p in pods
        if any("nvidia.com/gpu" in ((c.resources and c.resources.requests) or {})
               for c in p.spec.containers)
    ]  # fmt: skip


def elastic(name: str, replicas: int, least: int, gpus: int = 8) -> dict[str, Any]:
    job = JobBuilder(name).strategy("DataParallel")
    return job.role("worker", replicas, gpus=gpus, minReplicas=least).build()


@pytest.mark.usefixtures("operator")
def test_admitted_at_the_most_workers_that_fit_and_a_minimum_that_does_not_waits(
    local_cluster: Any, namespace: str
) -> None:
    api, core = local_cluster.api, local_cluster.core
    wait_for(lambda: not gpu_pods(core), 90, what="no GPU pod left by earlier tests")
    fixed = JobBuilder("fixed").strategy("DataParallel").role("worker", 2, gpus=8).build()
    create_job(api, namespace, fixed)  # 2 of the 4 nodes of 8 GPUs
    wait_phase(api, namespace, "fixed", "Running", timeout=60)
    create_job(api, namespace, elastic("grows", 4, 1))
    st = wait_phase(api, namespace, "grows", "Running", timeout=60)
    assert st["elastic"] == {"replicas": 2, "minReplicas": 1, "maxReplicas": 4, "resizes": 0}
    pods = sorted(job_pods(core, namespace, "grows"), key=lambda p: p.metadata.name)
    assert [p.metadata.name for p in pods] == ["grows-worker-0", "grows-worker-1"]
    assert env_of(pods[0])["WORLD_SIZE"] == "16" and st["ready"] == "2/2"
    create_job(api, namespace, elastic("too-big", 4, 3))

    def said() -> dict[str, Any]:
        conds = status(api, namespace, "too-big").get("conditions") or []
        return next((c for c in conds if c["type"] == "Admitted"), {})

    wait_for(lambda: said().get("reason") == "WaitingForAdmission", 30, what="too-big judged")
    assert "needs 3 pods of 8 nvidia.com/gpu" in said()["message"], said()
    assert not job_pods(core, namespace, "too-big")
