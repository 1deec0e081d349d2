"""Nodes that make gangs sick (policies/node_blame.py, plan_nodes.py): a restart that points
at a node (a hardware fault in the failed container's last words, a node lost, the first-
stopped rank of a stall) keeps the job's next gangs off it for a time; an ordinary failure
points at nothing. The pods get a preferred NotIn affinity, the built-in placement keeps the
gang off the node while it could fit elsewhere, and the avoidance expires."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from unit.operator.builders import at, iso, pods
from unit.operator.planning import DDP, RUNNING, SETTINGS, condition, ready, run, w
from unit.operator.test_admission import node, snapshot, view

from dtjob_operator.admission.decide import decide
from dtjob_operator.admission.fit import Node, PodDemand, can_host, place
from dtjob_operator.admission.placement import avoiding, keep_off, kept_off
from dtjob_operator.admission.seam import AdmissionVerdict
from dtjob_operator.lifecycle import Observed, plan
from dtjob_operator.policies import node_blame
from dtjob_operator.policies.failure_policy import PodFailure

XID = (
    "Traceback...\nRuntimeError: CUDA error: unspecified launch failure\n"
    "NVRM: Xid 79, GPU has fallen off the bus."
)


def _failure(detail: str | None, pod: str = "j-worker-1") -> PodFailure:
    return PodFailure(pod, "trainer", 1, None, "Error", detail)


def _pod(name: str, node: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"nodeName": node}}


FAULT = "pod j-worker-1 failed with a hardware fault: "
IB = "ncclInternalError: NET/IB : Got completion from peer with error 12"
ECC = "RuntimeError: uncorrectable ECC error encountered"


@pytest.mark.parametrize(
    ("detail", "why"),
    [
        (XID, FAULT + "NVRM: Xid 79, GPU has fallen off the bus."),
        (IB, FAULT + IB),
        (ECC, FAULT + ECC),
        ("ValueError: bad batch", None),  # the program's fault, not the node's
        ("torch.OutOfMemoryError: CUDA out of memory", None),
        (None, None),  # evicted, lost with a NotReady node: nothing here names the GPU
    ],
)
def test_a_failure_points_at_its_node_only_on_evidence_about_the_node(
    detail: str | None, why: str | None
) -> None:
    pods = [_pod("j-worker-0", "gpu-1"), _pod("j-worker-1", "gpu-2")]
    suspect = node_blame.from_failure(_failure(detail), pods)
    assert suspect == (node_blame.Suspect("gpu-2", why) if why else None)


def test_a_stall_points_at_the_node_of_the_rank_that_stopped_first() -> None:
    pods = [
        {"metadata": {"name": f"j-worker-{i}", "annotations": {"dtjob.io/rank": str(2 * i)}},
         "spec": {"nodeName": f"gpu-{i}"}}
        for i in range(2)
    ]  # fmt: skip
    progress = {"ranks": {"behind": [{"rank": 3, "step": 40}, {"rank": 0, "step": 41}]}}
    assert node_blame.from_stall(progress, pods) == node_blame.Suspect(
        "gpu-1", "rank 3 (pod j-worker-1) stopped first in a stall"
    )
    assert node_blame.from_stall({"step": 4}, pods) is None  # no heartbeat summary


def test_avoidance_renews_keeps_the_latest_and_expires() -> None:
    now = at(0)
    avoided: list[node_blame.Avoided] = []
    for i in range(node_blame.MAX_AVOIDED + 2):
        avoided = node_blame.avoid(avoided, node_blame.Suspect(f"n{i}", "x"), now, 60)
    assert [a.node for a in avoided] == [f"n{i}" for i in range(2, node_blame.MAX_AVOIDED + 2)]
    later = now + timedelta(seconds=30)
    avoided = node_blame.avoid(avoided, node_blame.Suspect("n2", "again"), later, 60)
    assert avoided[-1] == node_blame.Avoided("n2", "again", later + timedelta(seconds=60))
    status = [a.to_status() for a in avoided]
    assert [a.node for a in node_blame.read(status, now + timedelta(seconds=61))] == ["n2"]
    assert node_blame.read([{"node": 3}, "x", {"node": "n", "until": "soon"}], now) == []


def test_the_pods_prefer_any_other_node_beside_the_templates_own_affinity() -> None:
    own = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [
                {"key": "disk", "operator": "In", "values": ["ssd"]}]}}],
    }}  # fmt: skip
    out = avoiding(own, ["n2", "n1"])["nodeAffinity"]
    assert (
        out["requiredDuringSchedulingIgnoredDuringExecution"]
        == (own["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"])
    )
    # One value a requirement: the pod API refuses a field requirement with more (422).
    notin = [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in ("n1", "n2")]
    assert out["preferredDuringSchedulingIgnoredDuringExecution"] == [
        own["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0],
        {"weight": 100, "preference": {"matchFields": notin}},
    ]
    assert kept_off(keep_off({"spec": {}}, ["n1", "n2"])["spec"]) == {"n1", "n2"}
    gated = {"spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]}}
    assert keep_off(gated, ["n1"]) == gated  # Kueue's topology placed it already
    assert keep_off({"spec": {}}, []) == {"spec": {}}


def test_the_built_in_placement_uses_an_avoided_node_only_when_no_other_has_room() -> None:
    def nodes() -> list[Node]:
        return [Node(n, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}) for n in ("n1", "n2")]

    avoid = PodDemand(requests={"nvidia.com/gpu": 4}, avoid=frozenset({"n1"}))
    room = nodes()
    assert place([avoid, avoid], room)
    assert [n.free["nvidia.com/gpu"] for n in room] == [8, 0]  # both on n2, not first-fit n1
    room = nodes()
    assert place([avoid] * 3, room)  # n2 is full: the third goes to n1 rather than wait
    assert [n.free["nvidia.com/gpu"] for n in room] == [4, 0]
    assert can_host(room[0], avoid, room[0].free)  # a preference, never a refusal


def test_a_hardware_fault_restarts_the_gang_off_its_node() -> None:
    sick = w(1).failed(exit_code=1, finished_at=20, message=XID).on_node("gpu-2")
    p = run(RUNNING, ready(0).on_node("gpu-1"), sick, now=20)
    assert p.status["phase"] == "Restarting"
    until = iso(20 + SETTINGS.avoid_node_seconds)
    assert p.status["avoidedNodes"] == [{
        "node": "gpu-2", "until": until,
        "reason": f"pod j-worker-1 failed with a hardware fault: {XID.splitlines()[-1]}",
    }]  # fmt: skip
    # Exit code 1 is permanent by default, but not with a hardware fault in the last words.
    assert (
        "code 1 in container trainer: a hardware fault (GPU or interconnect) (retryable"
        in (condition(p, "Restarting")["message"])
    )
    said = [e.message for e in p.events if e.reason == "NodeAvoided"]
    assert said == [
        f"the job's next gangs keep off node gpu-2 until {until}: pod j-worker-1 failed with a "
        "hardware fault: NVRM: Xid 79, GPU has fallen off the bus."
    ]
    # The next gang's pods carry the NotIn term; once the avoidance expired, they do not.
    job = DDP.copy().with_full_status(p.status)
    nxt = run(job, now=20 + 15)
    assert {m["metadata"]["name"] for m in nxt.create if m["kind"] == "Pod"} == {
        "j-worker-0",
        "j-worker-1",
    }
    for pod in (m for m in nxt.create if m["kind"] == "Pod"):
        assert kept_off(pod["spec"]) == {"gpu-2"}
    late = run(job, now=20 + SETTINGS.avoid_node_seconds + 1)
    assert "avoidedNodes" not in late.status
    assert all(not kept_off(m["spec"]) for m in late.create if m["kind"] == "Pod")


def test_an_ordinary_failure_avoids_nothing() -> None:
    # Retryable (a signal), but nothing in it points at the node.
    p = run(RUNNING, ready(0).on_node("gpu-1"),
            w(1).failed(exit_code=137, finished_at=20, message="KeyError: 'x'").on_node("gpu-2"),
            now=20)  # fmt: skip
    assert p.status["phase"] == "Restarting" and "avoidedNodes" not in p.status
    assert not [e for e in p.events if e.reason == "NodeAvoided"]
    assert condition(p, "Restarting")["reason"] == "PodFailedRetryable"
    assert p.delete_pods and p.delete_grace_seconds is None  # the pods' own: they checkpoint


def _site(node: str, seconds_ago: float = 60, pod: str = "j-worker-0") -> dict[str, str]:
    return {"pod": pod, "node": node, "time": iso(100 - seconds_ago)}


TWO_NODES = [_pod("j-worker-0", "gpu-1"), _pod("j-worker-1", "gpu-2")]


@pytest.mark.parametrize(
    ("failure", "last", "pods_", "blamed"),
    [
        (_failure("KeyError"), _site("gpu-2"), TWO_NODES, "gpu-2"),  # again from gpu-2
        (_failure("KeyError"), _site("gpu-1"), TWO_NODES, None),  # the last came from gpu-1
        (_failure("KeyError"), None, TWO_NODES, None),  # the first failure
        (_failure("KeyError"), _site("gpu-2", seconds_ago=7200), TWO_NODES, None),  # too old
        # The whole gang on one node: the program and the node cannot be told apart.
        (_failure("KeyError"), _site("gpu-2"), [_pod("j-worker-1", "gpu-2")], None),
        # Out of memory is the program's, repeated or not.
        (PodFailure("j-worker-1", "trainer", 137, None, "OOMKilled", None), _site("gpu-2"),
         TWO_NODES, None),
    ],
)  # fmt: skip
def test_two_failures_in_a_row_from_one_node_point_at_it(
    failure: PodFailure, last: dict[str, str] | None, pods_: list[Any], blamed: str | None
) -> None:
    got = node_blame.from_repeat(failure, pods_, last, at(100), 3600)
    assert (got.node if got else None) == blamed
    if got is not None:
        assert got.why == (
            "two gangs in a row failed first there: pod j-worker-0, then pod j-worker-1 (Error 1)"
        )


def test_the_planner_keeps_each_failures_site_and_avoids_a_node_that_fails_twice() -> None:
    bad = "Fatal Python error: Segmentation fault"  # exit 139: retryable, names no node alone
    first = run(RUNNING, ready(0).on_node("gpu-1"),
                w(1).failed(exit_code=139, finished_at=20, message=bad).on_node("gpu-2"),
                now=20)  # fmt: skip
    assert first.status["lastFailure"] == {"pod": "j-worker-1", "node": "gpu-2", "time": iso(20)}
    assert "avoidedNodes" not in first.status
    again = RUNNING.copy().with_full_status(
        {**RUNNING.obj()["status"], "restarts": 1, "lastFailure": first.status["lastFailure"]}
    )
    second = run(again, ready(0, 1).on_node("gpu-1"),
                 w(1, 1).failed(exit_code=139, finished_at=80, message=bad).on_node("gpu-2"),
                 now=80)  # fmt: skip
    assert [a["node"] for a in second.status["avoidedNodes"]] == ["gpu-2"], second.status
    assert second.status["avoidedNodes"][0]["reason"].startswith("two gangs in a row failed")


def test_avoidance_off_when_the_operator_says_zero() -> None:
    observed = Observed(
        job=RUNNING.obj(), pods=pods(ready(0), w(1).failed(message=XID).on_node("gpu-2")),
        children=frozenset(), progress=None, now=at(20),
        admission=AdmissionVerdict(admitted=True),
    )  # fmt: skip
    off = SETTINGS.model_copy(update={"avoid_node_seconds": 0})
    assert "avoidedNodes" not in plan(observed, off).status
    assert plan(observed, SETTINGS).status["avoidedNodes"][0]["node"] == "gpu-2"


def _job_avoiding(name: str, *nodes: str, until: float = 600) -> dict[str, object]:
    entries = [{"node": n, "reason": "x", "until": iso(until)} for n in nodes]
    return {"metadata": {"namespace": "team", "name": name}, "status": {"avoidedNodes": entries}}


def test_a_node_that_several_jobs_avoid_is_kept_off_by_every_job() -> None:
    jobs = [
        _job_avoiding("a", "n1", "n2"),
        _job_avoiding("b", "n1"),
        _job_avoiding("c", "n2", until=-1),  # expired: counts for nothing
        {"metadata": {"namespace": "team", "name": "d"}},
    ]
    assert node_blame.cluster_suspects(jobs, at(0), 2) == {"n1": ("team/a", "team/b")}
    assert node_blame.cluster_suspects(jobs, at(0), 1) == {
        "n1": ("team/a", "team/b"), "n2": ("team/a",)
    }  # fmt: skip
    assert node_blame.cluster_suspects(jobs, at(0), 0) == {}  # off
    # On a MultiKueue manager, a dispatched job's status is a worker's: its nodes are not ours.
    far = _job_avoiding("e", "n2") | {"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}}
    assert node_blame.cluster_suspects([*jobs, far], at(0), 2) == {"n1": ("team/a", "team/b")}


def test_suspect_nodes_are_announced_once_and_counted() -> None:
    from datetime import UTC, datetime

    from dtjob_operator import suspects

    later = (datetime.now(UTC) - at(0)).total_seconds() + 3600  # SuspectNodes reads the clock
    jobs = [_job_avoiding("a", "n1", until=later), _job_avoiding("b", "n1", until=later)]
    said: list[tuple[str, str]] = []
    counts: list[int] = []
    watch = suspects.SuspectNodes(
        2, lambda: jobs, lambda: [{"metadata": {"name": "n1", "uid": "u1"}}],
        lambda node, msg: said.append((node["metadata"]["uid"], msg)), counts.append,
    )  # fmt: skip
    assert watch.current() == {"n1"}
    assert watch.renew() == {"n1"}  # worked out afresh: still one announcement
    assert said == [(
        "u1",
        "every dtjob job keeps off this node: restarts of 2 jobs pointed at it (team/a, "
        "team/b); see their avoidedNodes for why",
    )]  # fmt: skip
    assert counts == [1, 1]
    assert suspects.SuspectNodes(0, lambda: jobs, list, print, print).current() == frozenset()


def test_the_next_pods_keep_off_the_suspect_nodes_too() -> None:
    observed = Observed(
        job=DDP.obj(), pods=[], children=frozenset(), progress=None, now=at(0),
        admission=AdmissionVerdict(admitted=True), suspect_nodes=frozenset({"n9"}),
    )  # fmt: skip
    made = [m for m in plan(observed, SETTINGS).create if m["kind"] == "Pod"]
    assert made and all(kept_off(m["spec"]) == {"n9"} for m in made)


def test_topology_packing_puts_an_avoided_host_last_at_every_level() -> None:
    from dtjob_operator.admission.topology import place_gang

    host, rack = "kubernetes.io/hostname", "topology.example/rack"

    def nodes(free: dict[str, int]) -> list[Node]:
        return [
            Node(n, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": g},
                 {host: n, rack: "r0" if n < "n2" else "r1"})
            for n, g in free.items()
        ]  # fmt: skip

    pods = [PodDemand(requests={"nvidia.com/gpu": 4}, avoid=frozenset({"n0"}))] * 2
    plain = [PodDemand(requests={"nvidia.com/gpu": 4})] * 2
    room = {"n0": 8, "n1": 8, "n2": 0}
    # Best fit takes n0 (rack r0, first of two equal hosts); avoided, it takes n1.
    assert place_gang(plain, nodes(room), [rack, host]).nodes == ("n0", "n0")  # type: ignore[union-attr]
    placed = place_gang(pods, nodes(room), [rack, host])
    assert placed is not None and placed.nodes == ("n1", "n1"), placed
    # Only n0 has room: the gang still goes there rather than wait.
    placed = place_gang(pods, nodes({"n0": 8, "n1": 0, "n2": 0}), [rack, host])
    assert placed is not None and placed.nodes == ("n0", "n0"), placed


def _avoiding(job: Any, *nodes: str) -> Any:
    return replace(job, gang=tuple(replace(p, avoid=frozenset(nodes)) for p in job.gang))


def test_a_gang_waits_for_room_off_its_avoided_node_when_it_could_fit_there() -> None:
    # n1 is free, n2 is busy; the gang avoids n1 but n2 alone could hold it when free.
    nodes = [node("n1", 8), node("n2", 8, free=0)]
    result = decide(snapshot([_avoiding(view("j", 2, 4), "n1")], nodes), preemption=False)
    verdict = result.verdicts["j"]
    assert verdict.admit is False and "j" not in result.placements
    assert "it keeps off n1 (nodes its restarts or other jobs' pointed at" in verdict.message
    assert "free nvidia.com/gpu per Ready node: 0" in verdict.message, verdict.message
    # A job behind it in another namespace still gets n1: the avoidance is the gang's own.
    other = view("k", 1, 8, ns="b", created=1)
    result = decide(snapshot([_avoiding(view("j", 2, 4), "n1"), other], nodes), preemption=False)
    assert result.placements["k"] == {"0": "n1"}


def test_a_gang_that_could_never_fit_off_its_avoided_nodes_goes_there_rather_than_wait() -> None:
    # Two 8-GPU pods on two nodes: without n1 the gang could never fit, so n1 is used.
    nodes = [node("n1", 8), node("n2", 8)]
    result = decide(snapshot([_avoiding(view("j", 2, 8), "n1")], nodes), preemption=False)
    assert result.verdicts["j"].admit and sorted(result.placements["j"].values()) == ["n1", "n2"]


def test_a_restarted_gang_waits_off_the_node_its_fault_named() -> None:
    gang = _avoiding(view("r", 1, 8, admitted=True, started=False, restarted=1), "n1")
    busy = [node("n1", 8), node("n2", 8, free=0)]
    result = decide(snapshot([gang], busy), preemption=False)
    assert result.refit == {} and result.release["r"].reason == "WaitingForAdmission"
    assert "it keeps off n1" in result.release["r"].message
    result = decide(snapshot([gang], [node("n1", 8), node("n2", 8)]), preemption=False)
    assert result.refit == {"r": 1} and result.placements["r"] == {"0": "n2"}


def test_an_avoidance_that_expires_while_the_job_waits_stops_counting_at_once() -> None:
    from dtjob_operator.admission.snapshot import build_snapshot, gang_pods
    from dtjob_operator.admission.view_memo import ViewMemo

    # Queued, its status unchanged since the restart that named gpu-2 (until t=600): the
    # pass sees the avoidance before, not after, even with the job's view remembered.
    job = DDP.copy().with_full_status({
        "phase": "Queued", "restarts": 1,
        "avoidedNodes": [{"node": "gpu-2", "reason": "x", "until": iso(600)}],
    }).obj()  # fmt: skip
    job["metadata"]["resourceVersion"] = "7"
    memo = ViewMemo()

    def off_at(seconds: float) -> set[frozenset[str]]:
        snap = build_snapshot(
            jobs=[job], pods=[], nodes=[], quotas=[], priority_classes=[],
            gang_of=lambda j: gang_pods(j, SETTINGS), admitted=lambda j: False,
            not_before=lambda j: None, now=at(seconds), memo=memo, last=frozenset(),
        )  # fmt: skip
        return {p.avoid for p in snap.jobs[0].gang}

    assert off_at(100) == {frozenset({"gpu-2"})}
    assert off_at(601) == {frozenset()}
