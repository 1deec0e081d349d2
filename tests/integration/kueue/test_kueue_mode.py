"""admission "kueue": every job goes to Kueue, one without the queue label to the default
LocalQueue (DTJOB_KUEUE_DEFAULT_QUEUE), and waits with Kueue's message until it fits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from integration.kueue.test_kueue_jobs import team_queue

from helpers.crd import install_crd
from helpers.jobs import JobBuilder, create_job, wait_phase, wait_pods_running
from helpers.kube import create_namespace, unique
from helpers.kueue import Kueue
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def operator(cluster, kueue, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    install_crd(cluster.api)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:test", "DTJOB_ADMISSION": "kueue",
           "DTJOB_KUEUE_DEFAULT_QUEUE": "team"}  # fmt: skip
    proc = OperatorProcess(cluster.kubeconfig, log, env)
    proc.start()
    yield proc
    proc.stop()


@pytest.mark.usefixtures("operator")
def test_an_unlabelled_job_goes_to_the_default_local_queue(cluster: Any, kueue: Kueue) -> None:
    ns = create_namespace(cluster.core, "km")
    team_queue(cluster, ns, gpus=2)
    fits, waits = unique("fits"), unique("waits")
    create_job(cluster.api, ns, JobBuilder(fits).role("worker", 2, gpus=1).build())
    for pod in wait_pods_running(cluster.core, ns, fits, 2):
        assert pod.metadata.labels["kueue.x-k8s.io/local-queue-name"] == "team"
    create_job(cluster.api, ns, JobBuilder(waits).role("worker", 1, gpus=1).build())
    st = wait_phase(cluster.api, ns, waits, "Queued")
    admitted = next(c for c in st["conditions"] if c["type"] == "Admitted")
    assert admitted["reason"] == "WaitingForKueue" and "LocalQueue team" in admitted["message"]
    cluster.core.delete_namespace(ns)
