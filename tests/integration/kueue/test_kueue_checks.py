"""AdmissionChecks through the real Kueue, with a check controller played by the test (as a
ProvisioningRequest or a custom check would answer): a check that turns Ready with
podSetUpdates admits the job and the updates reach its pods; a Rejected check makes Kueue
deactivate the Workload, and the job stops for good saying so; updates that conflict with
the pods finish the Workload (FailedToStart: its quota goes back) and fail the job."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from integration.kueue.test_kueue_contract import all_pods, story, workload
from integration.kueue.test_kueue_jobs import (
    FLAVOR_LABELS,
    operator,  # noqa: F401 (its fixture, for this module)
    queued_job,
)
from integration.kueue.test_kueue_runs import condition, custom

from helpers.jobs import create_job, job_pods, wait_phase
from helpers.jobs import wait_pods_running as running
from helpers.kube import create_namespace, unique, wait_for
from helpers.kueue import GROUP, VERSION, Kueue

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
CONTROLLER = "test.dtjob.io/check"
CHECKER = "dtjob-test-check"  # the field manager of the test's check controller


def checked_queue(cluster: Any, ns: str) -> str:
    """A 1-GPU ClusterQueue whose Workloads need the AdmissionCheck of the test's controller
    (Active, as its controller would say), and LocalQueue `team` in `ns`: the check's name."""
    api, name = custom(cluster), unique("chk")
    api.create_cluster_custom_object(GROUP, VERSION, "admissionchecks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AdmissionCheck",
        "metadata": {"name": name}, "spec": {"controllerName": CONTROLLER}})  # fmt: skip
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.patch_cluster_custom_object_status(
        GROUP, VERSION, "admissionchecks", name,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AdmissionCheck", "metadata": {"name": name},
         "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active",
                                    "message": "the test answers", "lastTransitionTime": now}]}},
        field_manager=CHECKER, force=True, _content_type="application/apply-patch+yaml",
    )  # fmt: skip
    api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
        "metadata": {"name": f"{name}-gpu"}, "spec": {"nodeLabels": FLAVOR_LABELS}})  # fmt: skip
    gpus = [{"name": f"{name}-gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]}]
    api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {},
                 "admissionChecksStrategy": {"admissionChecks": [{"name": name}]},
                 "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                     "flavors": gpus}]}})  # fmt: skip
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": ns}, "spec": {"clusterQueue": name}})  # fmt: skip
    return name


def answer(cluster: Any, ns: str, job: str, check: str, state: str, **updates: Any) -> None:
    """The check controller's word on the job's Workload, once it holds quota: `state`
    (Ready, Rejected), with the worker podSet's updates."""
    wl = wait_for(lambda: (w := workload(cluster, ns, job)) and (
        condition(w, "QuotaReserved") or {}).get("status") == "True" and w,
        60, what=f"{job}'s Workload holding quota, its check pending",
        explain=lambda: story(cluster, ns, job))  # fmt: skip
    said: dict[str, Any] = {
        "name": check,
        "state": state,
        "message": f"the test says {state}",
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if updates:
        said["podSetUpdates"] = [{"name": "worker", **updates}]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
            "metadata": {"name": wl["metadata"]["name"], "namespace": ns},
            "status": {"admissionChecks": [said]}}  # fmt: skip
    custom(cluster).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        ns,
        "workloads",
        wl["metadata"]["name"],
        body,
        field_manager=CHECKER,
        force=True,
        _content_type="application/apply-patch+yaml",
    )


def test_a_ready_checks_pod_set_updates_reach_the_pods(cluster: Any, kueue: Kueue) -> None:
    ns = create_namespace(cluster.core, "ck")
    check = checked_queue(cluster, ns)
    name = unique("ready")
    create_job(cluster.api, ns, queued_job(name, 1, 1))
    answer(cluster, ns, name, check, "Ready", labels={"example.com/provisioned": "yes"},
           annotations={"example.com/request": "pr-1"})  # fmt: skip
    (pod,) = running(cluster.core, ns, name, 1, timeout=60)
    assert pod.metadata.labels["example.com/provisioned"] == "yes"
    assert pod.metadata.annotations["example.com/request"] == "pr-1"
    cluster.core.delete_namespace(ns)


def test_a_rejected_check_stops_the_job_for_good(cluster: Any, kueue: Kueue) -> None:
    ns = create_namespace(cluster.core, "cr")
    check = checked_queue(cluster, ns)
    name = unique("rejected")
    create_job(cluster.api, ns, queued_job(name, 1, 1))
    answer(cluster, ns, name, check, "Rejected")
    st = wait_phase(cluster.api, ns, name, "Suspended", timeout=60)
    suspended = next(c for c in st["conditions"] if c["type"] == "Suspended")
    assert suspended["reason"] == "Deactivated", (suspended, story(cluster, ns, name))
    assert "rejected" in suspended["message"].lower(), suspended
    wl = workload(cluster, ns, name)
    assert wl is not None and wl["spec"].get("active") is False
    assert not all_pods(cluster.core, ns, name)
    cluster.core.delete_namespace(ns)


def test_updates_that_conflict_with_the_pods_fail_the_job_and_free_the_quota(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "cc")
    check = checked_queue(cluster, ns)
    name, next_one = unique("conflict"), unique("next")
    create_job(cluster.api, ns, queued_job(name, 1, 1))
    answer(cluster, ns, name, check, "Ready", labels={"dtjob.io/role": "ps"})
    st = wait_phase(cluster.api, ns, name, "Failed", timeout=60)
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "AdmissionConflict" and "dtjob.io/role" in failed["message"]
    assert not job_pods(cluster.core, ns, name)
    finished = condition(workload(cluster, ns, name) or {}, "Finished") or {}
    assert finished.get("status") == "True" and finished.get("reason") == "FailedToStart"
    # Its quota went back: the next job in the queue holds it, then is admitted.
    create_job(cluster.api, ns, queued_job(next_one, 1, 1))
    answer(cluster, ns, next_one, check, "Ready")
    running(cluster.core, ns, next_one, 1, timeout=60)
    wait_phase(cluster.api, ns, next_one, "Running", timeout=60)
    cluster.core.delete_namespace(ns)
