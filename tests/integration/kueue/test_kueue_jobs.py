"""dtjob jobs through the real Kueue: a job labelled with a LocalQueue waits with no pods
until Kueue admits its Workload by the ClusterQueue's quota, starts with the flavor's node
labels and Kueue's labels on every pod, and gives the quota back when it ends (Finished),
which admits the next job. A job without the label goes through the built-in admission."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from integration.kueue.test_kueue_runs import condition, custom
from kubernetes import client

from dtjob_operator.kueue.workload import QUEUE_LABEL
from helpers.crd import install_crd
from helpers.jobs import GROUP as JOB_GROUP
from helpers.jobs import PLURAL as JOB_PLURAL
from helpers.jobs import VERSION as JOB_VERSION
from helpers.jobs import (
    JobBuilder,
    create_job,
    exit_pod,
    job_pods,
    status,
    wait_phase,
    wait_pods_running,
)
from helpers.kube import create_namespace, unique, wait_for
from helpers.kueue import GROUP, VERSION, Kueue
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]
FLAVOR_LABELS = {"nvidia.com/gpu.present": "true"}  # every fake GPU node has it


@pytest.fixture(scope="module")
def operator(cluster, kueue, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    install_crd(cluster.api)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(cluster.kubeconfig, log, {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:test"})
    proc.start()
    yield proc
    proc.stop()


def team_queue(cluster: Any, ns: str, gpus: int) -> str:
    api, name = custom(cluster), unique("cq")
    api.create_cluster_custom_object(
        GROUP,
        VERSION,
        "resourceflavors",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"{name}-gpu"},
            "spec": {"nodeLabels": FLAVOR_LABELS},
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
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"{name}-gpu",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
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
    return name  # fmt: skip


def queued_job(name: str, pods: int, gpus: int) -> dict[str, Any]:
    job = JobBuilder(name).role("worker", pods, gpus=gpus).build()
    job["metadata"]["labels"] = {QUEUE_LABEL: "team"}
    return job


@pytest.mark.usefixtures("operator")
def test_kueue_admits_starts_and_frees_the_quota(cluster: Any, kueue: Kueue) -> None:
    ns = create_namespace(cluster.core, "kj")
    cq = team_queue(cluster, ns, gpus=4)
    first, second = unique("first"), unique("second")
    create_job(cluster.api, ns, queued_job(first, 2, 2))
    pods = wait_pods_running(cluster.core, ns, first, 2)
    for pod in pods:
        assert pod.spec.node_selector == FLAVOR_LABELS, pod.spec.node_selector
        assert pod.metadata.labels["kueue.x-k8s.io/podset"] == "worker"
        assert pod.metadata.labels["kueue.x-k8s.io/cluster-queue-name"] == cq
        assert pod.metadata.annotations["kueue.x-k8s.io/workload"].startswith(
            f"distributedtrainingjob-{first}-"
        )
    wait_phase(cluster.api, ns, first, "Running")

    create_job(cluster.api, ns, queued_job(second, 1, 2))
    waiting = wait_phase(cluster.api, ns, second, "Queued", timeout=60)
    admitted = next(c for c in waiting["conditions"] if c["type"] == "Admitted")
    assert admitted["reason"] == "WaitingForKueue", admitted
    wait_for(
        lambda: (
            "nvidia.com/gpu" in status(cluster.api, ns, second)["conditions"][0]["message"]
            or any(
                "nvidia.com/gpu" in c.get("message", "")
                for c in status(cluster.api, ns, second)["conditions"]
            )
        ),
        60,
        what="Kueue's quota message on the waiting job",
    )
    assert job_pods(cluster.core, ns, second) == []

    for pod in pods:
        exit_pod(cluster.core, ns, pod.metadata.name, 0)
    wait_phase(cluster.api, ns, first, "Succeeded")
    workloads = custom(cluster).list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")
    done = next(w for w in workloads["items"] if first in w["metadata"]["name"])
    wait_for(
        lambda: (
            (
                c := condition(
                    custom(cluster).get_namespaced_custom_object(
                        GROUP, VERSION, ns, "workloads", done["metadata"]["name"]
                    ),
                    "Finished",
                )
            )
            and c["status"] == "True"
        ),
        30,
        what="the first Workload Finished",
    )
    wait_pods_running(cluster.core, ns, second, 1, timeout=90)
    cluster.core.delete_namespace(ns)


def priority_class(cluster: Any, name: str, value: int) -> None:
    from kubernetes import client

    try:
        client.SchedulingV1Api(cluster.api).create_priority_class(
            {"metadata": {"name": name}, "value": value, "preemptionPolicy": "PreemptLowerPriority"}
        )
    except client.ApiException as e:
        if e.status != 409:
            raise


@pytest.mark.usefixtures("operator")
def test_a_higher_priority_job_preempts_through_kueue_and_the_low_one_comes_back(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "kp")
    cq = team_queue(cluster, ns, gpus=4)
    custom(cluster).patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq, {
        "spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}})  # fmt: skip
    priority_class(cluster, "kueue-test-low", 100)
    priority_class(cluster, "kueue-test-high", 1000)
    low, high = unique("low"), unique("high")
    job = queued_job(low, 2, 2)
    job["spec"]["priorityClassName"] = "kueue-test-low"
    create_job(cluster.api, ns, job)
    wait_pods_running(cluster.core, ns, low, 2)
    wait_phase(cluster.api, ns, low, "Running")

    job = queued_job(high, 2, 2)
    job["spec"]["priorityClassName"] = "kueue-test-high"
    create_job(cluster.api, ns, job)
    # Kueue evicts the low job's Workload; the operator stops its gang (SIGTERM, as for its
    # own preemption), and once the pods are gone hands the quota back.
    stopped = wait_phase(cluster.api, ns, low, "Suspended", timeout=90)
    reasons = {c["type"]: c["reason"] for c in stopped["conditions"]}
    assert reasons["Suspended"] == "Preempted", stopped
    wait_pods_running(cluster.core, ns, high, 2, timeout=90)
    assert job_pods(cluster.core, ns, low) == []
    for pod in job_pods(cluster.core, ns, high):
        exit_pod(cluster.core, ns, pod.metadata.name, 0)
    wait_phase(cluster.api, ns, high, "Succeeded")
    wait_pods_running(cluster.core, ns, low, 2, timeout=90)  # re-admitted: a fresh gang
    cluster.core.delete_namespace(ns)


@pytest.mark.usefixtures("operator")
def test_a_healthy_job_reports_pods_ready_and_outlives_waitforpodsready(
    cluster: Any, kueue: Kueue
) -> None:
    from integration.kueue.conftest import PODS_READY_TIMEOUT_SECONDS

    ns = create_namespace(cluster.core, "kr")
    team_queue(cluster, ns, gpus=4)
    name = unique("ready")
    create_job(cluster.api, ns, queued_job(name, 2, 1))
    pods = {p.metadata.uid for p in wait_pods_running(cluster.core, ns, name, 2)}
    wait_phase(cluster.api, ns, name, "Running")
    api = custom(cluster)

    def workload() -> dict[str, Any]:
        items = api.list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]
        return next(w for w in items if name in w["metadata"]["name"])  # type: ignore[no-any-return]

    ready = wait_for(lambda: (c := condition(workload(), "PodsReady")) and c["status"] == "True"
                     and c, 30, what="PodsReady=True on the Workload")  # fmt: skip
    assert ready["reason"] == "Started"
    time.sleep(PODS_READY_TIMEOUT_SECONDS + 5)
    assert (condition(workload(), "Evicted") or {}).get("status") != "True", workload()
    assert status(cluster.api, ns, name)["phase"] == "Running"
    assert {p.metadata.uid for p in job_pods(cluster.core, ns, name)} == pods
    cluster.core.delete_namespace(ns)


@pytest.mark.usefixtures("operator")
def test_suspend_gives_the_quota_back_and_resume_queues_again(cluster: Any, kueue: Kueue) -> None:
    from kubernetes import client

    ns = create_namespace(cluster.core, "ks")
    team_queue(cluster, ns, gpus=2)
    first, second = unique("first"), unique("second")
    create_job(cluster.api, ns, queued_job(first, 2, 1))
    wait_pods_running(cluster.core, ns, first, 2)
    create_job(cluster.api, ns, queued_job(second, 2, 1))
    wait_phase(cluster.api, ns, second, "Queued")
    jobs = client.CustomObjectsApi(cluster.api)
    jobs.patch_namespaced_custom_object("dtjob.io", "v1alpha1", ns, "distributedtrainingjobs",
                                        first, {"spec": {"suspend": True}})  # fmt: skip
    wait_phase(cluster.api, ns, first, "Suspended")
    wait_pods_running(cluster.core, ns, second, 2, timeout=90)  # the quota went back
    jobs.patch_namespaced_custom_object("dtjob.io", "v1alpha1", ns, "distributedtrainingjobs",
                                        first, {"spec": {"suspend": False}})  # fmt: skip
    st = wait_phase(cluster.api, ns, first, "Queued", timeout=60)
    assert any(c["reason"] == "WaitingForKueue" for c in st["conditions"]), st
    assert job_pods(cluster.core, ns, first) == []
    cluster.core.delete_namespace(ns)


@pytest.mark.usefixtures("operator")
def test_a_job_deleted_while_admitted_gives_its_quota_back(cluster: Any, kueue: Kueue) -> None:
    ns = create_namespace(cluster.core, "kd")
    team_queue(cluster, ns, gpus=2)
    first, second = unique("first"), unique("second")
    create_job(cluster.api, ns, queued_job(first, 2, 1))
    wait_pods_running(cluster.core, ns, first, 2)
    create_job(cluster.api, ns, queued_job(second, 2, 1))
    wait_phase(cluster.api, ns, second, "Queued")
    client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object(
        JOB_GROUP, JOB_VERSION, ns, JOB_PLURAL, first
    )
    # The operator lets go of the Workload's finalizer: it goes, and Kueue admits the next.
    wait_for(
        lambda: not any(first in w["metadata"]["name"] for w in custom(cluster)
                        .list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]),
        30, what="the deleted job's Workload gone",
    )  # fmt: skip
    wait_pods_running(cluster.core, ns, second, 2, timeout=60)
    cluster.core.delete_namespace(ns)


@pytest.mark.usefixtures("operator")
def test_an_elastic_job_is_admitted_partially_at_what_the_queue_holds(
    cluster: Any, kueue: Kueue
) -> None:
    """Kueue's partial admission: an elastic job of 1 to 4 one-GPU workers in a ClusterQueue
    of 2 GPUs runs 2 workers (WORLD_SIZE 2), and its status and Admitted condition say so."""
    ns = create_namespace(cluster.core, "ke")
    team_queue(cluster, ns, gpus=2)
    name = unique("flex")
    job = JobBuilder(name).role("worker", 4, gpus=1, minReplicas=1).build()
    job["metadata"]["labels"] = {QUEUE_LABEL: "team"}
    create_job(cluster.api, ns, job)
    pods = wait_pods_running(cluster.core, ns, name, 2)
    env = {e.name: e.value for e in pods[0].spec.containers[0].env or []}
    assert env["WORLD_SIZE"] == "2", env
    st = wait_phase(cluster.api, ns, name, "Running")
    assert (st["elastic"]["replicas"], st["elastic"]["maxReplicas"]) == (2, 4), st["elastic"]
    admitted = next(c for c in st["conditions"] if c["type"] == "Admitted")
    assert admitted["message"].endswith("worker partially admitted: 2 of 4 pods"), admitted
    workload = next(
        w for w in custom(cluster).list_namespaced_custom_object(
            GROUP, VERSION, ns, "workloads")["items"]
        if name in w["metadata"]["name"]
    )  # fmt: skip
    assert workload["spec"]["podSets"][0]["minCount"] == 1
    assert workload["status"]["admission"]["podSetAssignments"][0]["count"] == 2
    assert len(job_pods(cluster.core, ns, name)) == 2  # the other two are never made
    cluster.core.delete_namespace(ns)
