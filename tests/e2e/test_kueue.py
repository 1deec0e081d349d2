"""A CPU example trains to Succeeded through the real Kueue on the real node: the operator
installed by the chart (its RBAC for Kueue's API included) hands the labelled job to Kueue,
starts the gang once Kueue admits it, and marks the Workload Finished at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml

from helpers.kueue import GROUP, VERSION, Kueue, install_crds
from helpers.realnode import E2E, RELEASE, RELEASE_NS

pytestmark = [pytest.mark.e2e]
QUEUE = "team"


@pytest.fixture(scope="module")
def kueue(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kueue]:
    workdir = tmp_path_factory.mktemp("kueue-e2e")
    install_crds(e2e.kubeconfig, workdir)
    e2e.kubectl("create", "namespace", "kueue-system", check=False)
    proc = Kueue(e2e.kubeconfig, workdir)
    yield proc
    proc.stop()


def cpu_queue(e2e: E2E, ns: str) -> str:
    """A default flavor, a ClusterQueue of CPU and memory, and LocalQueue QUEUE in `ns`."""
    name = f"e2e-{ns}"
    objects = [
        {"kind": "ResourceFlavor", "metadata": {"name": name}},
        {"kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": name, "resources": [{"name": "cpu", "nominalQuota": "8"},
                                            {"name": "memory", "nominalQuota": "32Gi"}]}]}]}},
        {"kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": ns},
         "spec": {"clusterQueue": name}},
    ]  # fmt: skip
    docs = [{"apiVersion": f"{GROUP}/{VERSION}", **o} for o in objects]
    e2e.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    return name


def test_a_cpu_example_trains_to_succeeded_through_kueue(
    e2e: E2E, e2e_namespace: str, kueue: Kueue
) -> None:
    ns = e2e_namespace
    cq = cpu_queue(e2e, ns)
    job = e2e.apply_example(
        "data-parallel", ns, labels={"kueue.x-k8s.io/queue-name": QUEUE}, trainer__steps=100
    )
    name = job["metadata"]["name"]
    deadline = time.monotonic() + 300
    while (status := e2e.job(ns, name).get("status", {})).get("phase") not in (
        "Succeeded", "Failed",
    ):  # fmt: skip
        assert time.monotonic() < deadline, status
        time.sleep(2)
    assert status["phase"] == "Succeeded", status
    assert status["progress"]["step"] == 100, status["progress"]
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert admitted["message"].startswith(f"admitted by Kueue in ClusterQueue {cq}"), admitted
    (workload,) = e2e.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
    finished = {c["type"]: c for c in workload["status"]["conditions"]}["Finished"]
    assert finished["status"] == "True" and finished["reason"] == "Succeeded", finished
    pods = e2e.get("pods", "-n", ns, "-l", f"dtjob.io/job-name={name}")["items"]
    assert pods and all(
        p["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == cq for p in pods
    )
    # The chart's operator started before Kueue's API existed here, or after it: either way
    # it watches the Workloads now (what wakes a job at Kueue's admission).
    logs = e2e.kubectl("logs", "-n", RELEASE_NS, "-l", f"app.kubernetes.io/instance={RELEASE}",
                       "--tail=-1")  # fmt: skip
    assert "watching the jobs' Workloads" in logs
