"""Topology-aware placement of one gang (operator/admission/topology.py), table-driven:
the best-fitting domain, required against preferred levels, rank order following the
topology, fragmentation kept low over a sequence of gangs."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_operator.admission.fit import Node, PodDemand, place
from dtjob_operator.admission.placement import Placement
from dtjob_operator.admission.placement import place as place_pod
from dtjob_operator.admission.resources import pod_host_ports
from dtjob_operator.admission.snapshot import pinned_node, topology_request
from dtjob_operator.admission.topology import GangPlacement, TopologyRequest, commit, place_gang

GPU = "nvidia.com/gpu"
BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)


def node(name: str, rack: str | None, free: int, block: str | None = "b0", gpus: int = 8) -> Node:
    labels = {HOST: name}
    if rack is not None:
        labels[RACK] = rack
    if block is not None:
        labels[BLOCK] = block
    return Node(name, {GPU: gpus}, {GPU: free}, labels)


def gang(pods: int, gpus: int) -> list[PodDemand]:
    return [PodDemand({GPU: gpus}) for _ in range(pods)]


def two_racks(free_a: tuple[int, int] = (8, 8), free_b: tuple[int, int] = (8, 8)) -> list[Node]:
    return [node("a0", "ra", free_a[0]), node("a1", "ra", free_a[1]),
            node("b0", "rb", free_b[0]), node("b1", "rb", free_b[1])]  # fmt: skip


CASES: list[tuple[str, list[Node], list[PodDemand], Any, tuple[str, ...] | None]] = [
    # (why, nodes, gang, request, expected nodes in rank order; None: no placement)
    ("best fit: the rack with the least room that holds it, keeping the other whole",
     two_racks(free_a=(4, 4)), gang(2, 4), TopologyRequest(RACK, True), ("a0", "a1")),
    ("ranks follow hosts: consecutive ranks share a host",
     two_racks(), gang(4, 4), TopologyRequest(RACK, True), ("a0", "a0", "a1", "a1")),
    ("required: a gang no rack holds has no placement",
     two_racks(free_a=(8, 4), free_b=(4, 8)), gang(3, 8), TopologyRequest(RACK, True), None),
    ("preferred: a gang no rack holds spreads, roomiest rack first, ranks in runs",
     two_racks(free_a=(8, 4), free_b=(8, 8)), gang(3, 8), TopologyRequest(RACK, False),
     ("b0", "b1", "a0")),
    ("no request: the lowest level that holds it (one host)",
     two_racks(free_a=(8, 6), free_b=(8, 8)), gang(3, 2), None, ("a1", "a1", "a1")),
    ("no request: a rack before the cluster",
     two_racks(free_a=(8, 4), free_b=(8, 8)), gang(2, 8), None, ("b0", "b1")),
    ("a node without the level's label is in no domain of it",
     [node("a0", "ra", 8), node("x0", None, 8)], gang(2, 8), TopologyRequest(RACK, True),
     None),
    ("... but takes ranks of a gang spread over the cluster",
     [node("a0", "ra", 8), node("x0", None, 8)], gang(2, 8), None, ("a0", "x0")),
    ("best fit over the level: a small job goes to the fullest host that holds it",
     [node("a0", "ra", 3), node("a1", "ra", 3), node("b0", "rb", 2), node("b1", "rb", 8)],
     gang(1, 2), None, ("b0",)),
    ("a rack whose free devices add up to less than the gang is not chosen",
     [node("a0", "ra", 4), node("a1", "ra", 4), node("b0", "rb", 8), node("b1", "rb", 4)],
     gang(3, 4), TopologyRequest(RACK, True), ("b0", "b0", "b1")),
    ("a selector is honoured inside the domain",
     [node("a0", "ra", 8), node("a1", "ra", 8)],
     [PodDemand({GPU: 8}, {HOST: "a1"})], TopologyRequest(RACK, True), ("a1",)),
]  # fmt: skip


@pytest.mark.parametrize(("why", "nodes", "pods", "request_", "expected"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_placement(
    why: str, nodes: list[Node], pods: list[PodDemand], request_: Any,
    expected: tuple[str, ...] | None,
) -> None:  # fmt: skip
    placed = place_gang(pods, nodes, LEVELS, request_)
    assert (placed.nodes if placed else None) == expected, why


def test_the_smallest_domain_holding_the_gang_is_named() -> None:
    nodes = two_racks()
    assert place_gang(gang(2, 8), nodes, LEVELS, TopologyRequest(RACK, True)) == GangPlacement(
        ("a0", "a1"), (RACK, "ra")
    )
    one_host = place_gang(gang(2, 4), nodes, LEVELS)
    assert one_host is not None and one_host.domain == (HOST, "a0")
    spread = [node("a0", "ra", 8, block="b0"), node("c0", "rc", 8, block="b1")]
    across = place_gang(gang(2, 8), spread, LEVELS, TopologyRequest(RACK, False))
    assert across is not None and across.domain is None  # two blocks: no common domain


def test_best_fit_keeps_room_whole_where_first_fit_strands_a_large_gang() -> None:
    """One host half used: a 4-GPU gang goes there, and an 8-GPU gang still finds a whole
    host. First fit (nodes in name order) takes the empty host for the small gang first."""

    def run(packer: str) -> list[bool]:
        nodes = [node("n0", "r0", 8), node("n1", "r0", 4)]
        fits = []
        for pods in (gang(1, 4), gang(1, 8)):
            if packer == "topology":
                placed = place_gang(pods, nodes, LEVELS)
                if placed is not None:
                    commit(placed, pods, nodes)
                fits.append(placed is not None)
            else:
                fits.append(place(pods, nodes))
        return fits

    assert run("topology") == [True, True]
    assert run("first-fit") == [True, False]  # the fragmentation the topology packer avoids


def test_a_parameter_server_and_workers_stay_in_rank_order_across_hosts() -> None:
    nodes = [node("a0", "ra", 8), node("a1", "ra", 8)]
    pods = [*gang(3, 4), PodDemand({GPU: 0, "cpu": 4000})]  # workers first, then the ps
    placed = place_gang(pods, nodes, LEVELS, TopologyRequest(RACK, True))
    assert placed is not None and placed.nodes[:3] in (("a0", "a0", "a1"), ("a1", "a1", "a0"))


def test_a_pinned_pod_holds_room_on_its_node_only() -> None:
    nodes = [node("a0", "ra", 8), node("a1", "ra", 8)]
    assert place([PodDemand({GPU: 8}, node_name="a1")], nodes)
    assert nodes[0].free[GPU] == 8 and nodes[1].free[GPU] == 0
    assert not place([PodDemand({GPU: 1}, node_name="a1")], nodes, commit=False)


def test_a_pin_written_into_a_pod_reads_back() -> None:
    terms = [{"matchExpressions": [{"key": k, "operator": "Exists"}]} for k in ("gpu", "tpu")]
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}  # fmt: skip
    pod = place_pod(
        {"metadata": {"name": "p"}, "spec": {"affinity": own}}, Placement(node_name="n7")
    )
    assert pinned_node(pod) == "n7"
    assert pinned_node({"spec": {"affinity": own}}) is None
    assert pinned_node({"spec": {}}) is None


def test_the_topology_request_is_read_from_the_spec() -> None:
    assert topology_request({"spec": {"placement": {"topology": {"required": RACK}}}}) == (
        TopologyRequest(RACK, True)
    )
    assert topology_request({"spec": {"placement": {"topology": {"preferred": BLOCK}}}}) == (
        TopologyRequest(BLOCK, False)
    )
    assert topology_request({"spec": {}}) is None


def test_pods_binding_one_host_port_never_share_a_node() -> None:
    """hostNetwork pods bind their container ports on the node: two of one gang on one node
    clash ("didn't have free ports"), so placement gives each its own node, and a node where
    a running pod holds the port is not used at all."""
    port = pod_host_ports(
        {"hostNetwork": True, "containers": [{"ports": [{"containerPort": 29500}]}]}
    )
    assert port == ("host-port TCP:29500",)
    pods = [PodDemand({GPU: 1}, host_ports=port) for _ in range(2)]
    nodes = [node("a0", "ra", 8), node("a1", "ra", 8)]
    placed = place_gang(pods, nodes, LEVELS)
    assert placed is not None and sorted(placed.nodes) == ["a0", "a1"]
    assert place_gang([*pods, pods[0]], nodes, LEVELS) is None  # three pods, two nodes
    nodes[1].free[port[0]] = 1  # a running pod binds the port there
    assert place_gang(pods[:1], nodes, LEVELS) == GangPlacement(("a0",), (HOST, "a0"))
    assert not place(pods, nodes, commit=False)


def test_host_ports_of_a_pod_spec() -> None:
    ports = [{"containerPort": 8080}, {"containerPort": 53, "protocol": "UDP", "hostPort": 5353}]
    assert pod_host_ports({"containers": [{"ports": ports}]}) == ("host-port UDP:5353",)
    both = ("host-port TCP:8080", "host-port UDP:53")
    assert pod_host_ports({"hostNetwork": True, "containers": [{"ports": ports[:1]}, {"ports": [
        {"containerPort": 53, "protocol": "UDP"}]}]}) == both  # fmt: skip
    assert pod_host_ports({"containers": [{}]}) == ()
