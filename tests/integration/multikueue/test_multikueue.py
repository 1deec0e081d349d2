"""One queue, many clusters: dtjob jobs dispatched by the real Kueue's MultiKueue from the
manager (the lane's cluster) to two workers (conftest.py). A job applied on the manager
runs on a worker, its progress and end come back to the manager, whose operator never
makes a pod for it nor writes its status; deleting it on the manager removes the worker's
copy; two workers with room for one job each get one each; what does not travel (a
claim that exists only on the manager) is said in the status; a job sent to the
MultiKueue queue without spec.managedBy waits and says what to set; managedBy is
immutable."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from integration.multikueue.conftest import MultiKueue
from kubernetes import client

from dtjob_api.contract import MANAGED_BY_MULTIKUEUE
from dtjob_client import Client
from dtjob_operator.kueue.workload import QUEUE_LABEL
from helpers.jobs import (
    JobBuilder,
    create_job,
    delete_job,
    exit_pod,
    get_job,
    job_pods,
    patch_job,
    status,
    wait_phase,
    wait_pods_running,
)
from helpers.kube import create_namespace, unique, wait_for
from helpers.kueue import GROUP, VERSION
from helpers.multikueue import GPUS_PER_WORKER, ensure_namespace, gpu_queue, local_queue

pytestmark = [pytest.mark.integration]


def queues(mk: MultiKueue) -> str:
    """A namespace on every cluster with LocalQueue "team": on the manager in a ClusterQueue
    of both workers' GPUs that runs the MultiKueue check, on each worker in one of its own."""
    ns = create_namespace(mk.manager.core, "mk")
    mk.namespaces.append(ns)
    cq = unique("cq")
    manager = client.CustomObjectsApi(mk.manager.api)
    gpu_queue(manager, cq, GPUS_PER_WORKER * len(mk.workers), checks=[mk.check])
    local_queue(manager, ns, "team", cq)
    for worker in mk.workers:
        ensure_namespace(worker.core, ns)
        gpu_queue(worker.custom, cq, GPUS_PER_WORKER)
        local_queue(worker.custom, ns, "team", cq)
    return ns


def dispatched_job(name: str, pods: int, gpus: int, **spec: Any) -> dict[str, Any]:
    job = JobBuilder(name).role("worker", pods, gpus=gpus).spec(
        managedBy=MANAGED_BY_MULTIKUEUE, **spec).build()  # fmt: skip
    job["metadata"]["labels"] = {QUEUE_LABEL: "team"}
    return job


def where(mk: MultiKueue, ns: str, name: str) -> str | None:
    """The worker that holds the job's copy, if one does."""
    found = [w.name for w in mk.workers if get_job(w.api, ns, name) is not None]
    assert len(found) <= 1, f"copies of {name} on {found}"
    return found[0] if found else None


def manager_workload(mk: MultiKueue, ns: str, name: str) -> dict[str, Any]:
    items = client.CustomObjectsApi(mk.manager.api).list_namespaced_custom_object(
        GROUP, VERSION, ns, "workloads", label_selector=f"dtjob.io/job-name={name}"
    )["items"]
    assert len(items) == 1, [i["metadata"]["name"] for i in items]
    return dict(items[0])


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def status_writers(mk: MultiKueue, ns: str, name: str) -> set[str]:
    """The field managers of the manager's copy's status."""
    job = get_job(mk.manager.api, ns, name) or {}
    return {e["manager"] for e in job["metadata"].get("managedFields") or []
            if e.get("subresource") == "status"}  # fmt: skip


def test_a_job_applied_on_the_manager_runs_on_a_worker_and_reports_back(mk: MultiKueue) -> None:
    ns = queues(mk)
    name = unique("far")
    started = time.monotonic()
    create_job(mk.manager.api, ns, dispatched_job(name, 2, 2))
    worker = mk.worker(wait_for(lambda: where(mk, ns, name), 90, what="the worker's copy"))
    pods = wait_pods_running(worker.core, ns, name, 2)
    print(f"apply on the manager -> gang running on {worker.name}: "
          f"{time.monotonic() - started:.1f} s")  # fmt: skip
    copy = get_job(worker.api, ns, name) or {}
    assert "managedBy" not in copy["spec"]
    assert copy["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"]
    # The worker ran it on the Workload MultiKueue made, adopted, not one of its own.
    workloads = worker.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")
    owned = [w for w in workloads["items"] if w["metadata"].get("ownerReferences")]
    assert [w["metadata"]["name"] for w in owned] == [
        copy["metadata"]["annotations"]["kueue.x-k8s.io/prebuilt-workload-name"]
    ]
    assert owned[0]["metadata"]["ownerReferences"][0]["uid"] == copy["metadata"]["uid"]
    # The manager: the worker's progress, no pod of its own, one status writer.
    wait_phase(mk.manager.api, ns, name, "Running", timeout=60)
    assert mk.manager.core.list_namespaced_pod(ns).items == []
    assert manager_workload(mk, ns, name)["status"]["clusterName"] == worker.cluster_name
    # PodsReady follows the copied status: the manager's Kueue runs waitForPodsReady too.
    wait_for(lambda: condition_true(manager_workload(mk, ns, name), "PodsReady"), 30,
             what="the manager's Workload PodsReady")  # fmt: skip
    events = mk.manager.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name},reason=Dispatched"
    ).items
    assert any(worker.cluster_name in e.message for e in events), [e.message for e in events]
    assert len(status_writers(mk, ns, name)) == 1, status_writers(mk, ns, name)
    why = Client(namespace=ns, kubeconfig=mk.manager.kubeconfig).why(name)
    assert why.where is not None and f"cluster {worker.cluster_name}" in why.where, why.where
    # The end comes back too, and the manager's quota with it.
    for pod in pods:
        exit_pod(worker.core, ns, pod.metadata.name, 0)
    wait_phase(mk.manager.api, ns, name, "Succeeded", timeout=90)

    wait_for(lambda: condition_true(manager_workload(mk, ns, name), "Finished"), 60,
             what="the manager's Workload Finished")  # fmt: skip
    assert mk.manager.core.list_namespaced_pod(ns).items == []
    assert len(status_writers(mk, ns, name)) == 1, status_writers(mk, ns, name)


def test_two_workers_with_room_for_one_job_each_get_one_each(mk: MultiKueue) -> None:
    ns = queues(mk)
    names = [unique("whole"), unique("whole")]
    for name in names:
        create_job(mk.manager.api, ns, dispatched_job(name, 1, GPUS_PER_WORKER))
    for name in names:
        wait_phase(mk.manager.api, ns, name, "Running", timeout=120)
    placed = sorted(str(where(mk, ns, n)) for n in names)
    assert placed == sorted(w.name for w in mk.workers), placed
    # Deleting a job on the manager removes the worker's copy and its pods.
    first, held_by = names[0], mk.worker(str(where(mk, ns, names[0])))
    delete_job(mk.manager.api, ns, first)
    wait_for(lambda: get_job(held_by.api, ns, first) is None, 60, what="the copy deleted")
    wait_for(lambda: job_pods(held_by.core, ns, first) == [], 60, what="its pods deleted")
    assert where(mk, ns, names[1]) is not None  # the other job runs on


def test_a_claim_that_exists_only_on_the_manager_is_said_in_the_status(mk: MultiKueue) -> None:
    ns = queues(mk)
    mk.manager.core.create_namespaced_persistent_volume_claim(ns, {
        "metadata": {"name": "ckpt"},
        "spec": {"accessModes": ["ReadWriteMany"],
                 "resources": {"requests": {"storage": "1Gi"}}}})  # fmt: skip
    name = unique("claim")
    create_job(mk.manager.api, ns, dispatched_job(name, 1, 1, checkpoint={"claimName": "ckpt"}))

    def said() -> dict[str, Any] | None:
        for c in status(mk.manager.api, ns, name).get("conditions") or []:
            if c["type"] == "CheckpointStorage" and c["reason"] == "ClaimNotFound":
                return dict(c)
        return None

    condition = wait_for(said, 90, what="ClaimNotFound copied back to the manager")
    assert "dispatched from" in condition["message"], condition
    assert "must exist on this worker cluster" in condition["message"], condition


def test_a_job_without_managed_by_in_a_multikueue_queue_waits_and_says_so(mk: MultiKueue) -> None:
    ns = queues(mk)
    name = unique("local")
    job = JobBuilder(name).role("worker", 1, gpus=1).build()
    job["metadata"]["labels"] = {QUEUE_LABEL: "team"}
    create_job(mk.manager.api, ns, job)

    def waiting() -> str | None:
        said = [str(c.get("message")) for c in status(mk.manager.api, ns, name).get(
            "conditions") or [] if c.get("reason") == "ManagedByRequired"]  # fmt: skip
        return said[0] if said else None

    message = wait_for(waiting, 60, what="the job to say what to set")
    assert MANAGED_BY_MULTIKUEUE in message and mk.check in message, message
    assert (
        client.CustomObjectsApi(mk.manager.api).list_namespaced_custom_object(
            GROUP, VERSION, ns, "workloads"
        )["items"]
        == []
    )
    assert where(mk, ns, name) is None
    # kubectl dtj submit (the client) sets it, as Kueue's webhooks do for Kueue's kinds.
    submitted = Client(namespace=ns, kubeconfig=mk.manager.kubeconfig).submit(
        JobBuilder(unique("sent")).role("worker", 1, gpus=1).build()
        | {"metadata": {"name": unique("sent"), "labels": {QUEUE_LABEL: "team"}}}
    )
    assert submitted.raw["spec"]["managedBy"] == MANAGED_BY_MULTIKUEUE
    wait_for(lambda: where(mk, ns, submitted.name), 90, what="the submitted job dispatched")
    # managedBy is immutable: setting it now is refused at the API.
    with pytest.raises(client.ApiException) as refused:
        patch_job(mk.manager.api, ns, name, {"spec": {"managedBy": MANAGED_BY_MULTIKUEUE}})
    assert refused.value.status == 422 and "immutable" in str(refused.value.body)


@pytest.fixture
def mk(multikueue: MultiKueue) -> Iterator[MultiKueue]:
    yield multikueue
    multikueue.clean_up()


def test_an_elastic_job_runs_at_the_size_its_worker_admits(mk: MultiKueue) -> None:
    """Queued on the manager at its maximum (3 x 4 GPUs fit the manager's 16), admitted
    partially by the worker (8 GPUs: 2 workers), it runs at 2 there, and says so on the
    manager."""
    ns = queues(mk)
    name = unique("flex")
    job = dispatched_job(name, 3, 4)
    job["spec"]["roles"]["worker"]["minReplicas"] = 1
    create_job(mk.manager.api, ns, job)
    worker = mk.worker(wait_for(lambda: where(mk, ns, name), 90, what="the worker's copy"))
    wait_pods_running(worker.core, ns, name, 2)
    copied = wait_phase(mk.manager.api, ns, name, "Running", timeout=60)
    assert (copied.get("elastic") or {}).get("replicas") == 2, copied
    assert len(job_pods(worker.core, ns, name)) == 2
