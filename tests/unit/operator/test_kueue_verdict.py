"""Kueue's word on a job, read from its Workload (operator/kueue/verdict.py): admitted or
why not, evicted and why, and the placement of each podSet merged into its pods as Kueue's
own job integrations merge it."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_operator.kueue.verdict import (
    PlacementConflict,
    flavors_of,
    place,
    placements,
    verdict,
)


def workload(*conditions: tuple[str, str, str, str], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "distributedtrainingjob-j-1a2b3"},
        "spec": {"queueName": "team-a"},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions
            ],
            **status,
        },
    }


ADMISSION = {
    "clusterQueue": "gpus",
    "podSetAssignments": [
        {"name": "worker", "count": 2, "flavors": {"nvidia.com/gpu": "h100", "cpu": "h100"}},
        {"name": "ps", "count": 1, "flavors": {"cpu": "cpu-pool"}},
    ],
}
FLAVORS = {
    "h100": {"nodeLabels": {"gpu": "h100", "zone": "a"},
             "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    "cpu-pool": {"nodeLabels": {"pool": "cpu"}},
}  # fmt: skip


def test_waiting_says_kueues_reason() -> None:
    message = "couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu"
    v = verdict(workload(("QuotaReserved", "False", "Pending", message)))
    assert not v.admitted and v.waiting == message and v.evicted is None
    assert verdict(workload()).waiting == "waiting for Kueue to consider the Workload"


def test_admitted_with_its_cluster_queue() -> None:
    v = verdict(workload(("QuotaReserved", "True", "QuotaReserved", ""),
                         ("Admitted", "True", "Admitted", ""), admission=ADMISSION))  # fmt: skip
    assert v.admitted and v.cluster_queue == "gpus" and v.waiting is None
    assert flavors_of(workload(admission=ADMISSION)) == {"h100", "cpu-pool"}


def test_an_eviction_stops_the_gang_even_while_still_admitted() -> None:
    v = verdict(workload(("Admitted", "True", "Admitted", ""),
                         ("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
                         admission=ADMISSION))  # fmt: skip
    assert not v.admitted and v.evicted == ("Preempted", "Preempted to accommodate a workload")


def test_each_pod_set_gets_its_flavors_labels_and_tolerations() -> None:
    found = placements(workload(admission=ADMISSION), FLAVORS)
    worker, ps = found["worker"], found["ps"]
    assert worker.node_selector == {"gpu": "h100", "zone": "a"}
    assert worker.tolerations == FLAVORS["h100"]["tolerations"]
    assert ps.node_selector == {"pool": "cpu"} and ps.tolerations == []
    assert worker.labels == {"kueue.x-k8s.io/podset": "worker",
                             "kueue.x-k8s.io/local-queue-name": "team-a",
                             "kueue.x-k8s.io/cluster-queue-name": "gpus"}  # fmt: skip
    assert worker.annotations == {"kueue.x-k8s.io/workload": "distributedtrainingjob-j-1a2b3"}


def test_admission_check_updates_add_to_the_pod_set_and_conflicts_are_refused() -> None:
    update = {"name": "worker", "labels": {"provisioned": "yes"}, "nodeSelector": {"slice": "7"}}
    checks = [{"name": "prov", "state": "Ready", "podSetUpdates": [update]}]
    found = placements(workload(admission=ADMISSION, admissionChecks=checks), FLAVORS)
    assert found["worker"].labels["provisioned"] == "yes"
    assert found["worker"].node_selector["slice"] == "7"
    clash = [{"name": "prov", "podSetUpdates": [{"name": "worker", "nodeSelector": {"zone": "b"}}]}]
    with pytest.raises(PlacementConflict, match="zone=b conflicts with zone=a"):
        placements(workload(admission=ADMISSION, admissionChecks=clash), FLAVORS)


def test_placing_a_pod_keeps_its_own_selector_and_adds_the_rest() -> None:
    pod = {
        "metadata": {"name": "j-worker-0", "labels": {"dtjob.io/role": "worker"}},
        "spec": {"nodeSelector": {"zone": "c"}, "containers": [{"name": "trainer"}]},
    }
    placed = place(pod, placements(workload(admission=ADMISSION), FLAVORS)["worker"])
    assert placed["spec"]["nodeSelector"] == {"zone": "c", "gpu": "h100"}
    assert placed["spec"]["tolerations"] == FLAVORS["h100"]["tolerations"]
    assert placed["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
    assert placed["metadata"]["labels"]["dtjob.io/role"] == "worker"
    assert pod["spec"]["nodeSelector"] == {"zone": "c"}  # the input is left as it was
