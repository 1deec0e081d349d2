"""The real Kueue (tests/helpers/kueue.py) runs against the local control plane and admits
by its own quota: a Workload that fits its ClusterQueue is Admitted with the flavor named;
one that does not is left pending with Kueue's reason. The ground the operator's Kueue
backend is tested on (issue 27)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from helpers.kube import create_namespace, unique, wait_for
from helpers.kueue import GROUP, VERSION, Kueue

pytestmark = [pytest.mark.integration]


def custom(cluster: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(cluster.api)


def queues(cluster: Any, ns: str, gpus: int) -> str:
    """A flavor, a ClusterQueue of `gpus` GPUs and a LocalQueue in `ns`; the LocalQueue's name."""
    api, name = custom(cluster), unique("cq")
    api.create_cluster_custom_object(
        GROUP,
        VERSION,
        "resourceflavors",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"{name}-gpu"},
            "spec": {"nodeLabels": {"pool": name}},
        },
    )
    api.create_cluster_custom_object(
        GROUP,
        VERSION,
        "clusterqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"{name}-gpu",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "64"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    api.create_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        "localqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": ns},
            "spec": {"clusterQueue": name},
        },
    )
    return "team"  # fmt: skip


def workload(name: str, queue: str, pods: int, gpus: int) -> dict[str, Any]:
    container = {
        "name": "trainer",
        "image": "x",
        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}},
    }
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": name},
            "spec": {"queueName": queue, "podSets": [{"name": "worker", "count": pods, "template": {
                "spec": {"restartPolicy": "Never", "containers": [container]}}}]}}  # fmt: skip


def condition(wl: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in wl.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def test_kueue_admits_what_fits_and_holds_what_does_not(cluster: Any, kueue: Kueue) -> None:
    ns = create_namespace(cluster.core, "kq")
    api = custom(cluster)
    queue = queues(cluster, ns, gpus=8)
    api.create_namespaced_custom_object(
        GROUP, VERSION, ns, "workloads", workload("fits", queue, 2, 4)
    )

    def get(name: str) -> dict[str, Any]:
        return api.get_namespaced_custom_object(GROUP, VERSION, ns, "workloads", name)  # type: ignore[no-any-return]

    admitted = wait_for(
        lambda: (c := condition(get("fits"), "Admitted")) and c["status"] == "True" and get("fits"),
        60, what=f"Workload fits Admitted (Kueue log {kueue.log})",
    )  # fmt: skip
    (assignment,) = admitted["status"]["admission"]["podSetAssignments"]
    assert assignment["name"] == "worker" and assignment["count"] == 2
    assert assignment["flavors"]["nvidia.com/gpu"].endswith("-gpu")
    api.create_namespaced_custom_object(
        GROUP, VERSION, ns, "workloads", workload("waits", queue, 1, 4)
    )
    pending = wait_for(
        lambda: (c := condition(get("waits"), "QuotaReserved")) and c["status"] == "False" and c,
        60, what="Workload waits pending",
    )  # fmt: skip
    assert "nvidia.com/gpu" in pending["message"], pending
    assert (condition(get("waits"), "Admitted") or {}).get("status") != "True"
    cluster.core.delete_namespace(ns)


def test_kueue_admits_the_workload_the_operator_builds(cluster: Any, kueue: Kueue) -> None:
    # Without Kueue's webhook nothing defaults or fixes what the operator writes: the
    # Workload of a two-role job is admitted as built, one assignment per podSet.
    from unit.operator.builders import a_job

    from dtjob_operator.kueue.workload import build_workload
    from dtjob_operator.settings import OperatorSettings

    ns = create_namespace(cluster.core, "kq")
    queue = queues(cluster, ns, gpus=8)
    job = (
        a_job("ps-job", ns).with_strategy("ParameterServer").with_workers(3, gpus=2).with_ps(1)
    ).job()  # fmt: skip
    wl = build_workload(job, queue, OperatorSettings())
    wl["metadata"].pop("ownerReferences")  # no such job object here; the operator's test has one
    wl["metadata"].pop("finalizers")
    api = custom(cluster)
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "workloads", wl)
    name = wl["metadata"]["name"]

    def get() -> dict[str, Any]:
        return api.get_namespaced_custom_object(GROUP, VERSION, ns, "workloads", name)  # type: ignore[no-any-return]

    admitted = wait_for(
        lambda: (c := condition(get(), "Admitted")) and c["status"] == "True" and get(),
        60, what=f"the operator's Workload Admitted (Kueue log {kueue.log})",
    )  # fmt: skip
    assignments = admitted["status"]["admission"]["podSetAssignments"]
    assert [(a["name"], a["count"]) for a in assignments] == [("worker", 3), ("ps", 1)]
    assert assignments[0]["resourceUsage"]["nvidia.com/gpu"] == "6"
    cluster.core.delete_namespace(ns)
