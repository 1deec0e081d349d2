"""The admission pass with topology (decide.py over topology.py): gangs admitted with a
placement of every pod, required levels honoured or said to be impossible, gangs admitted
in one pass on disjoint room, and victims chosen inside one domain."""

from __future__ import annotations

from dataclasses import replace

from unit.operator.test_admission import GPU, node, snapshot, view

from dtjob_operator.admission.decide import decide
from dtjob_operator.admission.fit import Node
from dtjob_operator.admission.snapshot import JobView, Snapshot
from dtjob_operator.admission.topology import TopologyRequest
from dtjob_operator.constants import REASON_INADMISSIBLE

RACK, HOST = "example.com/rack", "kubernetes.io/hostname"


def racks(free: dict[str, int] | None = None) -> list[Node]:
    """Two racks of two 8-GPU nodes: ra (a0, a1) and rb (b0, b1)."""
    return [
        node(name, 8, (free or {}).get(name), **{RACK: f"r{name[0]}", HOST: name})
        for name in ("a0", "a1", "b0", "b1")
    ]


def with_levels(s: Snapshot) -> Snapshot:
    return replace(s, topology_levels=(RACK, HOST))


def named(job_name: str, pods: int, gpus: int, **fields: object) -> JobView:
    names = tuple(f"{job_name}-worker-{i}" for i in range(pods))
    return view(job_name, pods, gpus, pod_names=names, **fields)  # type: ignore[arg-type]


def test_an_admitted_gang_gets_a_node_for_every_pod_inside_its_rack() -> None:
    job = named("packed", 4, 4, topology=TopologyRequest(RACK, True))
    result = decide(with_levels(snapshot([job], racks({"a0": 4}))), preemption=False)
    assert result.verdicts["packed"].admit
    # Rack a has 12 free GPUs, rack b 16: the best fit is rack b (a cannot hold 16).
    assert result.placements["packed"] == {
        "packed-worker-0": "b0", "packed-worker-1": "b0",
        "packed-worker-2": "b1", "packed-worker-3": "b1",
    }  # fmt: skip


def test_a_gang_no_rack_could_ever_hold_is_told_so_naming_the_level() -> None:
    job = named("huge", 3, 8, topology=TopologyRequest(RACK, True))
    verdict = decide(with_levels(snapshot([job], racks())), preemption=False).verdicts["huge"]
    assert not verdict.admit and verdict.reason == REASON_INADMISSIBLE
    assert f"inside one {RACK}" in verdict.message and "largest: 16" in verdict.message


def test_gangs_admitted_in_one_pass_get_disjoint_room() -> None:
    """Two gangs of 2 x 4 GPUs and one of 1 x 8 fill 4 x 8 GPUs exactly: each pod gets a
    node, and no node is given more than it has (nothing is left Pending)."""
    jobs = [named("small-1", 2, 4, created=1), named("small-2", 2, 4, created=2),
            named("big", 1, 8, created=3)]  # fmt: skip
    result = decide(with_levels(snapshot(jobs, racks())), preemption=False)
    assert all(result.verdicts[j].admit for j in ("small-1", "small-2", "big"))
    used: dict[str, int] = {}
    for job in jobs:
        for node_name in result.placements[job.uid].values():
            used[node_name] = used.get(node_name, 0) + job.gang[0].requests[GPU]
    assert max(used.values()) <= 8 and sum(used.values()) == 24


def test_the_admitted_gang_is_told_its_domain() -> None:
    job = named("packed", 2, 8, topology=TopologyRequest(RACK, True))
    result = decide(with_levels(snapshot([job], racks({"a0": 4}))), preemption=False)
    assert result.domains["packed"] == f"{RACK}=rb"
    assert result.verdicts["packed"].message == f"the whole gang fits, placed in {RACK}=rb"
    one_host = decide(with_levels(snapshot([named("small", 2, 2)], racks())), preemption=False)
    assert one_host.domains["small"] == f"{HOST}=a0"  # no request: the lowest level that holds it


def test_a_required_rack_with_no_room_now_waits_naming_the_level() -> None:
    """Rack a has 12 free GPUs, rack b 8 (16 in the cluster): a gang of 2 x 8 that must sit
    in one rack waits, and says the rack level was too small, not the cluster."""
    job = named("packed", 2, 8, topology=TopologyRequest(RACK, True))
    nodes = racks({"a0": 4, "b0": 0})
    verdict = decide(with_levels(snapshot([job], nodes)), preemption=False).verdicts["packed"]
    assert not verdict.admit and verdict.reason == "WaitingForAdmission"
    assert f"no {RACK} has room for it now (roomiest: ra, with 12 {GPU} free" in verdict.message
    # Without the requirement it spreads over the two racks and is admitted.
    free = named("spread", 2, 8, topology=TopologyRequest(RACK, False))
    assert decide(with_levels(snapshot([free], nodes)), preemption=False).verdicts["spread"].admit


def test_preemption_frees_one_rack_and_spares_jobs_whose_room_would_not_help() -> None:
    """A high-priority gang of 2 x 8 GPUs needs one whole rack. `low-a` holds a0 (rack a,
    a1 free); `low-b1` and `low-b2` hold b0 and b1. Stopping low-a frees rack a; stopping
    the rack-b jobs would free as much, but two jobs. Nothing else is preempted, though
    the newest low job (low-b2) comes first in plain victim order."""
    held = {"low-a": "a0", "low-b1": "b0", "low-b2": "b1"}
    running = [
        named(name, 1, 8, admitted=True, created=i, held=((where, {GPU: 8}),))
        for i, (name, where) in enumerate(held.items())
    ]
    high = named("high", 2, 8, priority=10, created=9, topology=TopologyRequest(RACK, True))
    nodes = racks({"a0": 0, "b0": 0, "b1": 0})
    result = decide(with_levels(snapshot([*running, high], nodes)), preemption=True)
    assert set(result.preempt) == {"low-a"}
    assert "preempting lower-priority job(s) low-a" in result.verdicts["high"].message
