"""The operator under test: our CRD installed on the cluster and the operator running on the
host against it.

The operator is module-scoped (one per test file) so a test that kills it cannot disturb
other files; tests that need a fresh one use `OperatorProcess.restart()`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from helpers.apimetrics import free_port
from helpers.crd import install_crd
from helpers.operator import OperatorProcess


@pytest.fixture(scope="session")
def crd(cluster) -> None:  # type: ignore[no-untyped-def]
    install_crd(cluster.api)


@pytest.fixture(scope="module")
def operator(cluster, crd, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(cluster.kubeconfig, log, {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:test"})
    proc.start()
    yield proc
    proc.stop()
    print(f"operator log: {log}")


@pytest.fixture
def metrics_port() -> int:
    return free_port()


@pytest.fixture
def metered_operator(cluster, crd, namespace, tmp_path, metrics_port) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    """An operator of this test's namespace alone (jobs other tests left behind elsewhere
    must not keep it busy), serving its metrics on `metrics_port`."""
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", {
        "DTJOB_TRAINER_IMAGE": "dtjob/trainer:test", "DTJOB_NAMESPACES": namespace,
        "DTJOB_METRICS_PORT": str(metrics_port),
    })  # fmt: skip
    proc.start()
    yield proc
    proc.stop()
