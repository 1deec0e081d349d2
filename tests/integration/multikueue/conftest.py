"""MultiKueue for this package alone (docs/multikueue.md): the lane's cluster is the manager,
with a real Kueue configured to dispatch DistributedTrainingJobs and the operator; two
worker control planes of their own, each with one fake 8-GPU node, its own real Kueue and
its own operator. Started once for the package (the workers in parallel) and stopped after
it: the rest of the lane never pays for them."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from helpers.crd import install_crd
from helpers.kube import unique
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

    def worker(self, name: str) -> Worker:
        return next(w for w in self.workers if w.name == name)


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
