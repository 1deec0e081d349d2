"""An inadmissible gang is told what really excludes every node (admission/diagnose.py)."""

from __future__ import annotations

import pytest

from dtjob_operator.admission.fit import Node, PodDemand
from dtjob_operator.admission.messages import capacity_never
from dtjob_operator.admission.resources import CPU, GPU, MEMORY, PODS

GI = 1024**3


def node(
    name: str, gpus: int = 8, cpu: int = 64000, memory: int = 512 * GI, taints=(), **labels: str
) -> Node:  # type: ignore[no-untyped-def]
    alloc = {GPU: gpus, CPU: cpu, MEMORY: memory, PODS: 110}
    return Node(name, alloc, dict(alloc), labels, tuple(taints))


def pod(
    gpus: int = 1, selector: dict[str, str] | None = None, tolerations=(), **more: int
) -> PodDemand:  # type: ignore[no-untyped-def]
    return PodDemand({GPU: gpus, PODS: 1, **more}, selector or {}, tuple(tolerations))


NODES = [node(f"n{i}", pool="a") for i in range(5)]
TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("gang", "nodes", "has"),
    [
        (
            [pod(8, {"pool": "b"})],
            NODES,
            ("nodeSelector (pool=b) matches none of the 5 Ready nodes",),
        ),
        (
            [pod(1, {"pool": "a"})],
            [node("t0", pool="a", taints=[TAINT]), node("t1", pool="a", taints=[TAINT])],
            ("taints it does not tolerate (dedicated=ml:NoSchedule)", "add a toleration"),
        ),
        ([pod(1, cpu=128000)], NODES, ("needs 128 cpu", "has 64", "Ready nodes it may use")),
        ([pod(1, memory=1024 * GI)], NODES, ("needs 1Ti memory", "has 512Gi")),
        ([pod(16)], NODES, (f"needs 16 {GPU}", "has 8")),
        ([pod(1)], [node("cpu0", gpus=0)], (f"no Ready node advertises {GPU}", "device plugin")),
    ],
)
def test_the_real_blocker_is_named(
    gang: list[PodDemand], nodes: list[Node], has: tuple[str, ...]
) -> None:
    message = capacity_never(gang, nodes)
    assert message.startswith("can never be admitted: ")
    for text in has:
        assert text in message, message
    assert "even if empty" not in message


def test_a_gang_whose_pods_fit_alone_gets_the_numbers() -> None:
    # Each 8-GPU pod fits an empty node; six of them do not fit five nodes.
    message = capacity_never([pod(8) for _ in range(6)], NODES)
    assert "could not hold them even if empty (largest node: 8" in message


def test_tolerated_taint_and_matching_selector_do_not_block() -> None:
    nodes = [node("t0", pool="a", taints=[TAINT])]
    gang = [pod(16, {"pool": "a"}, [{"key": "dedicated", "operator": "Exists"}])]
    assert f"needs 16 {GPU}" in capacity_never(gang, nodes)


def test_the_numbers_count_only_the_nodes_the_gang_may_use() -> None:
    # Two small nodes of its pool (4 GPUs each, one cordoned away) and big nodes it may not
    # use: the message speaks of the one pool node, not of the 8-GPU nodes elsewhere.
    pool = [node("p0", 4, pool="p")]
    gang = [pod(4, {"pool": "p"}) for _ in range(2)]
    message = capacity_never(gang, [*pool, *NODES])
    assert "the 1 Ready nodes it may use could not hold them" in message
    assert "(largest node: 4 nvidia.com/gpu)" in message
