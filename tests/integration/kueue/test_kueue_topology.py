"""Topology Aware Scheduling through the real Kueue: the fake GPU nodes form two racks of two
hosts; a 4-pod gang of 3 GPUs a pod with spec.placement.topology.required on the rack
label is admitted into one rack, its pods are created gated, and Kueue's ungater places
them in rank order (ranks 0-1 on the first host, 2-3 on the next), which the job's
Admitted condition states."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from integration.kueue.test_kueue_jobs import FLAVOR_LABELS, operator, queued_job
from integration.kueue.test_kueue_runs import custom

from dtjob_operator.constants import LABEL_POD_SET_INDEX
from helpers.jobs import create_job, delete_job, get_job, job_pods, wait_phase, wait_pods_running
from helpers.kube import unique, wait_for
from helpers.kueue import GROUP, VERSION, Kueue

pytestmark = [pytest.mark.integration]
__all__ = ["operator"]  # the module's operator fixture, shared with test_kueue_jobs
RACK = "topology.dtjob.test/rack"
HOST = "kubernetes.io/hostname"
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


@pytest.fixture
def racks(cluster: Any) -> Iterator[dict[str, str]]:
    """The fake GPU nodes labelled into two racks (node -> rack); the labels go after."""
    nodes = sorted(
        n.metadata.name
        for n in cluster.core.list_node(
            label_selector="type=kwok,nvidia.com/gpu.present=true"
        ).items
    )[:4]
    assert len(nodes) == 4, nodes
    # Pods of earlier tests' namespaces may still be going: the racks must be empty. So must
    # Kueue's view of them: an earlier test's Workload, still admitted while its namespace
    # goes, keeps its hosts in Kueue's topology cache after its pods are gone.
    wait_for(lambda: not gpu_pods_on(cluster.core, nodes), 90, what="no GPU pod on the racks")
    wait_for(lambda: not placed_workloads(cluster), 90, what="no Workload placed by topology")
    placed = {node: f"r{i // 2}" for i, node in enumerate(nodes)}
    for node, rack in placed.items():
        cluster.core.patch_node(node, {"metadata": {"labels": {RACK: rack}}})
    yield placed
    for node in placed:
        cluster.core.patch_node(node, {"metadata": {"labels": {RACK: None}}})


def gpu_pods_on(core: Any, nodes: list[str]) -> list[str]:
    """Unfinished pods holding GPUs on these nodes."""
    pods = core.list_pod_for_all_namespaces(field_selector=UNFINISHED).items
    return [
        p.metadata.name for p in pods if p.spec.node_name in nodes
        and any("nvidia.com/gpu" in ((c.resources and c.resources.requests) or {})
                for c in p.spec.containers)
    ]  # fmt: skip


def placed_workloads(cluster: Any) -> list[str]:
    """Workloads that hold a topology assignment (TAS-admitted, of any namespace)."""
    items = custom(cluster).list_cluster_custom_object(GROUP, VERSION, "workloads")["items"]
    return [
        w["metadata"]["name"] for w in items
        if any(a.get("topologyAssignment") for a in
               (((w.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []))
    ]  # fmt: skip


def topology_queue(cluster: Any, ns: str, gpus: int) -> str:
    """A Topology (rack, host), a flavor of it over the fake GPU nodes, a ClusterQueue of
    that flavor only and a LocalQueue "team" in `ns`; the ClusterQueue's name."""
    api, name = custom(cluster), unique("tas")
    api.create_cluster_custom_object(GROUP, VERSION, "topologies", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology", "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]}})  # fmt: skip
    api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": FLAVOR_LABELS, "topologyName": name}})  # fmt: skip
    api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": name,
                         "resources": [{"name": "nvidia.com/gpu",
                                        "nominalQuota": gpus}]}]}]}})  # fmt: skip
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": ns}, "spec": {"clusterQueue": name}})  # fmt: skip
    return name


@pytest.mark.usefixtures("operator")
def test_a_gang_that_requires_a_rack_lands_in_one_rack_in_rank_order(
    cluster: Any, kueue: Kueue, racks: dict[str, str], namespace: str
) -> None:
    ns = namespace
    topology_queue(cluster, ns, gpus=32)
    name = unique("packed")
    job = queued_job(name, 4, 3)  # 12 GPUs: two pods a host, two hosts of one rack
    job["spec"]["placement"] = {"topology": {"required": RACK}}
    create_job(cluster.api, ns, job)
    pods = wait_pods_running(cluster.core, ns, name, 4, timeout=120)
    by_index = sorted(pods, key=lambda p: int(p.metadata.labels[LABEL_POD_SET_INDEX]))
    assert [p.metadata.labels[LABEL_POD_SET_INDEX] for p in by_index] == ["0", "1", "2", "3"]
    assert [p.metadata.name for p in by_index] == [p.metadata.name for p in pods]  # rank order
    for pod in pods:  # Kueue's ungater lifted the gate and named the host
        assert not pod.spec.scheduling_gates, pod.spec.scheduling_gates
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        assert pod.metadata.annotations["kueue.x-k8s.io/podset-required-topology"] == RACK
    hosts = [p.spec.node_name for p in by_index]
    assert len({racks[h] for h in hosts}) == 1, hosts  # one rack
    # Consecutive ranks share a host, and the hosts follow Kueue's domain order.
    assert hosts[0] == hosts[1] and hosts[2] == hosts[3] and hosts[0] < hosts[2], hosts
    running = wait_phase(cluster.api, ns, name, "Running")
    admitted = next(c for c in running["conditions"] if c["type"] == "Admitted")
    assert f"worker placed by topology on {hosts[0]} x2, {hosts[2]} x2" in admitted["message"]
    assert len(job_pods(cluster.core, ns, name)) == 4


def _admitted_message(api: Any, ns: str, name: str) -> str:
    status = (get_job(api, ns, name) or {}).get("status") or {}
    return next(
        (c.get("message", "") for c in status.get("conditions", []) if c["type"] == "Admitted"),
        "",
    )


@pytest.mark.usefixtures("operator")
def test_a_gang_that_prefers_a_rack_spans_two_when_one_cannot_hold_it(
    cluster: Any, kueue: Kueue, racks: dict[str, str], namespace: str
) -> None:
    # Six pods of 3 GPUs: a host of 8 holds two, a rack of two hosts four. Required, one
    # rack cannot hold the gang and it waits, saying so; preferred, Kueue packs it into as
    # few racks as it can (four pods in one, two in the other) and the ranks follow.
    ns = namespace
    topology_queue(cluster, ns, gpus=32)
    strict, loose = unique("strict"), unique("loose")
    job = queued_job(strict, 6, 3)
    job["spec"]["placement"] = {"topology": {"required": RACK}}
    create_job(cluster.api, ns, job)
    wait_for(
        lambda: "topology" in _admitted_message(cluster.api, ns, strict).lower(),
        90, what=f"{strict} saying why one rack cannot hold it",
    )  # fmt: skip
    assert not job_pods(cluster.core, ns, strict)
    delete_job(cluster.api, ns, strict)

    job = queued_job(loose, 6, 3)
    job["spec"]["placement"] = {"topology": {"preferred": RACK}}
    create_job(cluster.api, ns, job)
    pods = wait_pods_running(cluster.core, ns, loose, 6, timeout=120)
    by_index = sorted(pods, key=lambda p: int(p.metadata.labels[LABEL_POD_SET_INDEX]))
    assert [p.metadata.name for p in by_index] == [p.metadata.name for p in pods]  # rank order
    for pod in pods:
        assert not pod.spec.scheduling_gates, pod.spec.scheduling_gates
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        assert pod.metadata.annotations["kueue.x-k8s.io/podset-preferred-topology"] == RACK
    hosts = [p.spec.node_name for p in by_index]
    per_rack = sorted(sum(racks[h] == r for h in hosts) for r in set(racks.values()))
    assert per_rack == [2, 4], hosts  # as few racks as the gang allows, the first one full
    assert all(hosts.count(h) == 2 for h in set(hosts)), hosts  # two pods a host
    assert [racks[h] for h in hosts] == sorted(racks[h] for h in hosts), hosts  # ranks by rack
    running = wait_phase(cluster.api, ns, loose, "Running")
    admitted = next(c for c in running["conditions"] if c["type"] == "Admitted")
    assert "worker placed by topology on" in admitted["message"], admitted
