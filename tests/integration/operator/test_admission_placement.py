"""Placement that is kept (issue 28): the admission gives every pod of a gang a node and
the pod is created pinned there, so gangs admitted together never wait on each other's
room. Three gangs (2 x 4, 2 x 4 and 1 x 8 GPUs) fill the 4 fake nodes of 8 GPUs exactly;
before, the scheduler spread the small gangs' pods and left the 8-GPU pod Pending in 2 of
4 tries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dtjob_operator.admission.snapshot import pinned_node
from helpers.jobs import JobBuilder, create_job, job_pods, wait_phase
from helpers.kube import wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


@pytest.fixture(scope="module")
def operator(cluster, crd, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(cluster.kubeconfig, log, {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:t",
                                                     "DTJOB_RESYNC_SECONDS": "2"})  # fmt: skip
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


@pytest.mark.usefixtures("operator")
def test_gangs_admitted_together_all_run_on_the_nodes_they_were_given(
    local_cluster: Any, namespace: str
) -> None:
    core = local_cluster.core
    wait_for(lambda: not gpu_pods(core), 90, what="no GPU pod left by earlier tests")
    gangs = {"small-1": (2, 4), "small-2": (2, 4), "big": (1, 8)}
    for name, (pods, gpus) in gangs.items():
        job = JobBuilder(name).strategy("DataParallel").role("worker", pods, gpus=gpus).build()
        create_job(local_cluster.api, namespace, job)
    for name in gangs:
        wait_phase(local_cluster.api, namespace, name, "Running", timeout=60)
    for name in gangs:
        for pod in job_pods(core, namespace, name):
            raw = core.api_client.sanitize_for_serialization(pod)
            assert pinned_node(raw) == pod.spec.node_name, (pod.metadata.name, raw["spec"])
