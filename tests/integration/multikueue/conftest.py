"""MultiKueue for this package alone (docs/multikueue.md): the lane's cluster is the manager,
with a real Kueue configured to dispatch DistributedTrainingJobs and the operator; two
worker control planes of their own, each with one fake 8-GPU node, its own real Kueue and
its own operator. Started once for the package (the workers in parallel) and stopped after
it: the rest of the lane never pays for them."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from helpers.crd import install_crd
from helpers.jobs import GROUP as JOB_GROUP
from helpers.jobs import PLURAL as JOB_PLURAL
from helpers.jobs import VERSION as JOB_VERSION
from helpers.jobs import delete_job
from helpers.kube import unique, wait_for
from helpers.kueue import Kueue, install_crds
from helpers.multikueue import (
    DTJ_FRAMEWORK,
    KUEUE_NAMESPACE,
    Worker,
    connect_workers,
    disconnect_workers,
    ensure_namespace,
    start_worker,
    worker_stack,
)
from helpers.operator import OperatorProcess

OPERATOR_ENV = {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:test"}


@dataclass
class MultiKueue:
    manager: Any  # the lane's Cluster
    workers: list[Worker]
    kueue: Kueue
    operator: OperatorProcess
    check: str  # the MultiKueue AdmissionCheck

    namespaces: list[str] = field(default_factory=list)
    """The namespaces this test made (queues()): emptied after it."""

    def worker(self, name: str) -> Worker:
        return next(w for w in self.workers if w.name == name)

    def clean_up(self) -> None:
        """Delete the test's jobs on the manager and wait until their copies' pods are gone
        from the workers: every test's ClusterQueues are its own, but the workers' nodes
        are shared, and a job left running holds GPUs the next test's Kueue counts free."""
        for ns in self.namespaces:
            jobs = client.CustomObjectsApi(self.manager.api).list_namespaced_custom_object(
                JOB_GROUP, JOB_VERSION, ns, JOB_PLURAL)["items"]  # fmt: skip
            for job in jobs:
                delete_job(self.manager.api, ns, job["metadata"]["name"])
        for ns in self.namespaces:
            for w in self.workers:
                wait_for(lambda w=w, ns=ns: not w.core.list_namespaced_pod(ns).items, 90,  # type: ignore[misc]
                         what=f"the pods of namespace {ns} gone from {w.name}")  # fmt: skip
        self.namespaces.clear()


@pytest.fixture(scope="package")
def multikueue(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiKueue]:
    workdir = tmp_path_factory.mktemp("multikueue")
    workers: list[Worker] = []
    parts: list[Any] = []
    check = unique("dispatch")
    try:
        with ThreadPoolExecutor(2) as pool:
            started = [pool.submit(start_worker, f"worker-{i}", i, workdir) for i in range(2)]
            workers = [f.result() for f in started]
            for w in workers:
                (workdir / w.name).mkdir()
            list(pool.map(lambda w: worker_stack(w, workdir / w.name, OPERATOR_ENV), workers))
        install_crd(cluster.api)
        install_crds(cluster.kubeconfig, workdir)
        ensure_namespace(cluster.core, KUEUE_NAMESPACE)
        kueue = Kueue(cluster.kubeconfig, workdir, multikueue_kinds=[DTJ_FRAMEWORK])
        parts.append(kueue)
        operator = OperatorProcess(cluster.kubeconfig, workdir / "operator.log", OPERATOR_ENV)
        operator.start()
        parts.append(operator)
        connect_workers(cluster.api, workers, check)
        yield MultiKueue(cluster, workers, kueue, operator, check)
    finally:
        disconnect_workers(cluster.api, workers, check)
        for part in reversed(parts):
            part.stop()
        for w in workers:
            w.down()
