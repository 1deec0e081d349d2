"""The admin's guard rails on a real control plane, as the chart sets them (DTJOB_* from the
Helm values; unit/operator/test_chart checks the mapping): each is refused by an operator
with the defaults, the job Failed/InvalidSpec naming the field and the setting, with no pod
made; the same job runs under an operator whose settings allow it.

Two operators share the cluster, each serving a namespace of its own (DTJOB_NAMESPACES)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from helpers.jobs import JobBuilder, create_job, job_pods, wait_phase
from helpers.kube import create_namespace, unique
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]
W = "spec.roles.worker.template"
C = f"{W}.spec.containers[0].securityContext"
ALLOWING = {
    "DTJOB_ALLOW_HOST_NAMESPACES": "true",
    "DTJOB_ALLOW_PRIVILEGED": "true",
    "DTJOB_ALLOWED_CAPABILITIES": "IPC_LOCK,NET_RAW",
    "DTJOB_ALLOWED_PRIORITY_CLASSES": "system-*,*",
    "DTJOB_MAX_TERMINATION_GRACE_PERIOD_SECONDS": "3600",
    "DTJOB_ALLOW_HOST_PATH": "true",
}


def secure(**context: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "trainer", "securityContext": context}]}}


# (id, template, spec fields, field in the message, the setting it names)
RAILS: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    ("priority-class", {}, {"priorityClassName": "system-cluster-critical"},
     "spec.priorityClassName", "allowedPriorityClasses"),
    ("grace-period", {"spec": {"terminationGracePeriodSeconds": 3600}}, {},
     f"{W}.spec.terminationGracePeriodSeconds", "maxTerminationGracePeriodSeconds"),
    # The RDMA case: host network and pinned memory.
    ("host-network", {"spec": {"hostNetwork": True}}, {}, f"{W}.spec.hostNetwork",
     "allowHostNamespaces"),
    ("host-ipc", {"spec": {"hostIPC": True}}, {}, f"{W}.spec.hostIPC", "allowHostNamespaces"),
    ("privileged", secure(privileged=True), {}, f"{C}.privileged", "allowPrivileged"),
    ("capability", secure(capabilities={"add": ["IPC_LOCK"]}), {}, f"{C}.capabilities.add[0]",
     "allowedCapabilities"),
    ("host-path", {"volumes": [{"name": "h", "hostPath": {"path": "/var/lib"}}]}, {},
     f"{W}.volumes[0].hostPath", "allowHostPath"),
]  # fmt: skip


def _operator(cluster: Any, log: Any, namespace: str, env: dict[str, str]) -> OperatorProcess:
    settings = {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:test", "DTJOB_NAMESPACES": namespace}
    return OperatorProcess(cluster.kubeconfig, log, {**settings, **env})


@pytest.fixture(scope="module")
def served(cluster, crd, tmp_path_factory) -> Iterator[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(namespace of the default operator, namespace of the allowing one)."""
    strict, lenient = create_namespace(cluster.core, "rails"), create_namespace(cluster.core, "ok")
    logs = tmp_path_factory.mktemp("operators")
    procs = [
        _operator(cluster, logs / "strict.log", strict, {}),
        _operator(cluster, logs / "lenient.log", lenient, ALLOWING),
    ]
    for proc in procs:
        proc.start()
    yield strict, lenient
    for proc in procs:
        proc.stop()
    for ns in (strict, lenient):
        cluster.core.delete_namespace(ns)


def job(name: str, template: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    builder = JobBuilder(name).strategy("DataParallel").role("worker", 2, gpus=1, template=template)
    return builder.spec(**spec).build()


@pytest.mark.parametrize(("template", "spec", "field", "setting"), [r[1:] for r in RAILS],
                         ids=[r[0] for r in RAILS])  # fmt: skip
def test_refused_by_default_and_run_where_the_setting_allows_it(
    cluster: Any,
    served: tuple[str, str],
    template: dict[str, Any],
    spec: dict[str, Any],
    field: str,
    setting: str,
) -> None:
    strict, lenient = served
    name = unique("rail")
    for ns in served:
        create_job(cluster.api, ns, job(name, template, spec))
    st = wait_phase(cluster.api, strict, name, "Failed")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert field in failed["message"] and f"setting {setting}" in failed["message"], failed
    assert job_pods(cluster.core, strict, name) == []
    wait_phase(cluster.api, lenient, name, "Running")
    assert len(job_pods(cluster.core, lenient, name)) == 2
