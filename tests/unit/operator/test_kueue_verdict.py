"""Kueue's word on a job, read from its Workload (operator/kueue/verdict.py): admitted or
why not, evicted and why, and the placement of each podSet merged into its pods as Kueue's
own job integrations merge it."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_operator.admission.placement import Placement, PlacementConflict, place
from dtjob_operator.kueue.verdict import (
    admitted_counts,
    admitted_message,
    flavors_of,
    indexed,
    placements,
    topology_domains,
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
    assert admitted_message(workload(admission=ADMISSION)) == (
        "admitted by Kueue in ClusterQueue gpus, flavors worker=h100, ps=cpu-pool"
    )


def test_a_partial_admission_says_how_many_pods_of_how_many() -> None:
    partial = workload(admission={**ADMISSION, "podSetAssignments": [
        {"name": "worker", "count": 2, "flavors": {"nvidia.com/gpu": "h100"}}]})  # fmt: skip
    partial["spec"]["podSets"] = [{"name": "worker", "count": 4, "minCount": 1}]
    assert admitted_counts(partial) == {"worker": 2}
    assert admitted_message(partial) == (
        "admitted by Kueue in ClusterQueue gpus, flavors worker=h100; "
        "worker partially admitted: 2 of 4 pods"
    )
    # An assignment without a count (an older Kueue) admitted the podSet's count.
    del partial["status"]["admission"]["podSetAssignments"][0]["count"]
    assert admitted_counts(partial) == {"worker": 4}
    assert "partially" not in admitted_message(partial)


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


# Kueue's own encoder's output (pkg/util/tas.V1Beta2From) for 2 + 2 + 1 pods on 3 hosts.
HOSTS = {"levels": ["kubernetes.io/hostname"], "slices": [{
    "domainCount": 3,
    "valuesPerLevel": [{"individual": {"prefix": "kind-worker", "roots": ["", "2", "3"]}}],
    "podCounts": {"individual": [2, 2, 1]}}]}  # fmt: skip
RACKS = {"levels": ["example.com/block", "example.com/rack"], "slices": [{
    "domainCount": 2,
    "valuesPerLevel": [{"universal": "b1"}, {"individual": {"prefix": "r", "roots": ["1", "2"]}}],
    "podCounts": {"universal": 4}}]}  # fmt: skip


def tas_workload(topology: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    wl = workload(admission={"clusterQueue": "gpus", "podSetAssignments": [
        {"name": "worker", "count": 5, "flavors": {"nvidia.com/gpu": "h100"},
         "topologyAssignment": topology}]})  # fmt: skip
    wl["spec"]["podSets"] = [{"name": "worker", "count": 5, "topologyRequest": request}]
    return wl


def test_the_topology_assignment_is_read_in_rank_order() -> None:
    assert topology_domains(tas_workload(HOSTS, {})) == {
        "worker": [("kind-worker", 2), ("kind-worker2", 2), ("kind-worker3", 1)]
    }
    assert topology_domains(tas_workload(RACKS, {})) == {"worker": [("r1", 4), ("r2", 4)]}
    assert topology_domains(workload(admission=ADMISSION)) == {}
    said = admitted_message(tas_workload(HOSTS, {}))
    assert said.endswith(
        "; worker placed by topology on kind-worker x2, kind-worker2 x2, kind-worker3 x1"
    )


def test_pods_placed_by_topology_are_gated_annotated_and_indexed_for_the_ungater() -> None:
    request = {"required": "example.com/rack", "podIndexLabel": "dtjob.io/pod-set-index"}
    worker = placements(tas_workload(HOSTS, request), FLAVORS)["worker"]
    assert worker.scheduling_gates == ("kueue.x-k8s.io/topology",)
    assert worker.annotations["kueue.x-k8s.io/podset-required-topology"] == "example.com/rack"
    pod = {"metadata": {"name": "j-worker-3"},
           "spec": {"schedulingGates": [{"name": "other"}],
                    "containers": [{"name": "t"}]}}  # fmt: skip
    placed = place(pod, indexed(worker, "dtjob.io/pod-set-index", 3))
    assert placed["metadata"]["labels"]["dtjob.io/pod-set-index"] == "3"
    assert placed["spec"]["schedulingGates"] == [{"name": "other"},
                                                 {"name": "kueue.x-k8s.io/topology"}]  # fmt: skip
    # A ClusterQueue of topology flavors only places a job that asked for nothing.
    implied = placements(tas_workload(HOSTS, {"podIndexLabel": "x"}), FLAVORS)["worker"]
    assert implied.annotations["kueue.x-k8s.io/podset-unconstrained-topology"] == "true"
    # Without a topology assignment nothing is gated, and no index label is added.
    plain = placements(workload(admission=ADMISSION), FLAVORS)["worker"]
    assert plain.scheduling_gates == () and indexed(plain, "x", 1) == plain


def test_a_pinned_pod_runs_on_its_node_only_and_keeps_its_own_terms() -> None:
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]},
            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h200"]}]},
        ]}}}  # fmt: skip
    pod = {"metadata": {"name": "j-worker-0"}, "spec": {"affinity": own, "containers": []}}
    placed = place(pod, Placement(node_name="gpu-7"))
    terms = placed["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    pin = {"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}
    assert [t["matchFields"] for t in terms] == [[pin], [pin]]  # ANDed into each ORed term
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["h100"], ["h200"]]
    bare = place({"metadata": {"name": "p"}, "spec": {}}, Placement(node_name="gpu-7"))
    assert bare["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"] == {"nodeSelectorTerms": [
            {"matchFields": [pin]}]}  # fmt: skip
    assert "matchFields" not in str(own)  # the template is left as it was
