"""A job's priority raised by relabelling the job, as with Kueue's own integrations: the
operator moves its Workload to the new WorkloadPriorityClass, and the real Kueue acts on
it (here by preempting the lower job it was queued behind). A label naming a class that
does not exist is said on the job, and the Workload keeps its priority."""

from __future__ import annotations

from typing import Any

import pytest
from integration.kueue.test_kueue_contract import wait_pending, workload
from integration.kueue.test_kueue_jobs import (
    operator,  # noqa: F401 (its fixture, for this module)
    queued_job,
    team_queue,
)
from integration.kueue.test_kueue_runs import custom

from dtjob_operator.kueue.workload import PRIORITY_LABEL
from helpers.jobs import create_job, patch_job, wait_phase
from helpers.jobs import wait_pods_running as running
from helpers.kube import create_namespace, unique, wait_for
from helpers.kueue import GROUP, VERSION, Kueue

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
WPCS = "workloadpriorityclasses"


def workload_priority_class(cluster: Any, name: str, value: int) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value}  # fmt: skip
    custom(cluster).create_cluster_custom_object(GROUP, VERSION, WPCS, body)


def events_of(cluster: Any, ns: str, job: str, reason: str) -> list[str]:
    found = cluster.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={job}")
    return [e.message for e in found.items if e.reason == reason]


def test_relabelling_a_queued_job_raises_its_workloads_priority_and_kueue_acts_on_it(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "kp")
    cq = team_queue(cluster, ns, gpus=1)
    custom(cluster).patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq, {
        "spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}})  # fmt: skip
    low, high = unique("low"), unique("high")
    workload_priority_class(cluster, low, 100)
    workload_priority_class(cluster, high, 1000)
    first, second = unique("first"), unique("second")
    for name in (first, second):
        job = queued_job(name, 1, 1)
        job["metadata"]["labels"][PRIORITY_LABEL] = low
        create_job(cluster.api, ns, job)
        if name == first:
            running(cluster.core, ns, first, 1)
    wait_pending(cluster, ns, second)  # the same priority as the running job: it waits
    wl = workload(cluster, ns, second)
    assert wl is not None and wl["spec"]["priority"] == 100

    patch_job(cluster.api, ns, second, {"metadata": {"labels": {PRIORITY_LABEL: high}}})

    def raised() -> dict[str, Any] | None:
        now = workload(cluster, ns, second)
        return now if now and now["spec"].get("priority") == 1000 else None

    wl = wait_for(raised, 30, what="the Workload's priority raised",
                  explain=lambda: str(workload(cluster, ns, second)))  # fmt: skip
    assert wl["spec"]["priorityClassRef"] == {
        "group": GROUP, "kind": "WorkloadPriorityClass", "name": high}  # fmt: skip
    assert any(m.startswith("Updated workload priority class:") for m in
               events_of(cluster, ns, second, "UpdatedWorkload"))  # fmt: skip
    # Kueue now ranks it above the running job: it preempts it and runs.
    stopped = wait_phase(cluster.api, ns, first, "Suspended", timeout=60)
    assert {c["type"]: c["reason"] for c in stopped["conditions"]}["Suspended"] == "Preempted"
    running(cluster.core, ns, second, 1, timeout=60)

    # The preempted job relabelled with a class that does not exist: said once, and its
    # Workload keeps its priority (it still queues, at 100).
    patch_job(cluster.api, ns, first, {"metadata": {"labels": {PRIORITY_LABEL: "no-such"}}})
    wait_for(
        lambda: events_of(cluster, ns, first, "WorkloadPriorityNotUpdated"),
        30,
        what="the Warning about the missing class",
    )
    said_all = events_of(cluster, ns, first, "WorkloadPriorityNotUpdated")
    assert len(said_all) == 1, said_all  # said once, not at every pass
    (said,) = said_all
    assert f"keeps WorkloadPriorityClass {low}" in said
    assert "WorkloadPriorityClass no-such, which does not exist" in said
    kept = workload(cluster, ns, first)
    assert kept is not None and kept["spec"]["priority"] == 100
    cluster.core.delete_namespace(ns)
    for name in (low, high):
        custom(cluster).delete_cluster_custom_object(GROUP, VERSION, WPCS, name)
