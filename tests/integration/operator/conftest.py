"""The operator under test: our CRD installed on the cluster and the operator running on the
host against it.

The operator is module-scoped (one per test file) so a test that kills it cannot disturb
other files; tests that need a fresh one use `OperatorProcess.restart()`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest
from kubernetes import client

from helpers.apimetrics import free_port
from helpers.crd import install_crd
from helpers.kube import unique
from helpers.operator import OperatorProcess


@pytest.fixture(scope="session")
def crd(cluster) -> None:  # type: ignore[no-untyped-def]
    install_crd(cluster.api)


@pytest.fixture(scope="module")
def operator(cluster, crd, tmp_path_factory, request) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    """The module's operator; a module's OPERATOR_ENV adds settings (DTJOB_*) of its own."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {
        "DTJOB_TRAINER_IMAGE": "dtjob/trainer:test",
        **getattr(request.module, "OPERATOR_ENV", {}),
    }
    proc = OperatorProcess(cluster.kubeconfig, log, env)
    proc.start()
    yield proc
    proc.stop()
    print(f"operator log: {log}")


OPERATOR_FIXTURES = ("operator", "metered_operator")
LOG_TAIL_LINES = 80
FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, Any]:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[FAILED] = True
    return report


@pytest.fixture(autouse=True)
def operator_log_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """When a test fails, print what its operator logged during it (the log's path alone is
    of no use from a CI report: the file is gone with the machine)."""
    names = [n for n in OPERATOR_FIXTURES if n in request.fixturenames]
    if not names:
        yield
        return
    proc: OperatorProcess = request.getfixturevalue(names[0])
    start = proc.log.stat().st_size if proc.log.exists() else 0
    yield
    if not request.node.stash.get(FAILED, False) or not proc.log.exists():
        return
    with proc.log.open("rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace").splitlines()
    print(f"--- the operator's log during this test ({len(lines)} lines, the last "
          f"{min(len(lines), LOG_TAIL_LINES)}; whole file {proc.log}) ---")  # fmt: skip
    print("\n".join(lines[-LOG_TAIL_LINES:]))


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


@pytest.fixture
def priority_classes(cluster) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    """Priority classes for one test: high (1000, preempts nobody), low (10), urgent."""
    api = client.SchedulingV1Api(cluster.api)
    names = {"high": unique("high"), "low": unique("low"), "urgent": unique("urgent")}
    api.create_priority_class(
        {"metadata": {"name": names["high"]}, "value": 1000, "preemptionPolicy": "Never"}
    )
    api.create_priority_class({"metadata": {"name": names["low"]}, "value": 10})
    api.create_priority_class({"metadata": {"name": names["urgent"]}, "value": 100000})
    yield names
    for name in names.values():
        api.delete_priority_class(name)


@pytest.fixture
def volumes(cluster: Any) -> Iterator[list[str]]:
    """Names of the PersistentVolumes a test makes (cluster-scoped: deleted afterwards)."""
    made: list[str] = []
    yield made
    for pv in made:
        cluster.core.delete_persistent_volume(pv)
