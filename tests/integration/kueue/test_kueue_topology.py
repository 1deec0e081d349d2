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
from helpers.jobs import create_job, job_pods, wait_phase, wait_pods_running
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
    # Pods of earlier tests' namespaces may still be going: the racks must be empty.
    wait_for(lambda: not gpu_pods_on(cluster.core, nodes), 90, what="no GPU pod on the racks")
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
