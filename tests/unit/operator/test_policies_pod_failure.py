"""Pod failure policy (policies/pod_failure_policy.py) and lost nodes (policies/nodes.py):
which gang failures count against backoffLimit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from unit.operator.builders import PodBuilder, a_job, a_pod

from dtjob_api.spec import RunPolicy
from dtjob_operator.policies.failure_policy import gang_failures
from dtjob_operator.policies.nodes import OUT_OF_SERVICE_TAINT, confirmed_lost, lost_nodes
from dtjob_operator.policies.pod_failure_policy import disruption_of, judge_gang

JOB = a_job()
MEMBERS = ["j-worker-0", "j-worker-1"]


def w(index: int) -> PodBuilder:
    return a_pod(JOB, "worker", index)


@dataclass
class Case:
    name: str
    pods: list[PodBuilder]
    policy: dict[str, Any] = field(default_factory=dict)
    lost: frozenset[str] = frozenset()
    retryable: bool = True
    counted: bool = True
    reason: str = "PodFailedRetryable"
    message_has: tuple[str, ...] = ()


def rules(*r: dict[str, Any]) -> dict[str, Any]:
    return {"podFailurePolicy": {"rules": list(r)}}


DISRUPTION_RULE = {"onPodConditions": [{"type": "DisruptionTarget"}]}

CASES = [
    Case(
        "plain retryable exit counts",
        [w(0).running(), w(1).failed(137)],
        reason="PodFailedRetryable",
    ),
    Case(
        "permanent exit fails",
        [w(0).running(), w(1).failed(1)],
        retryable=False,
        reason="PodFailedPermanent",
    ),
    Case(
        "evicted through the Eviction API: a disruption, not counted",
        [w(0).running(), w(1).running().disrupted().terminating(5)],
        counted=False,
        reason="Disrupted",
        message_has=("EvictionByEvictionAPI", "not counted against backoffLimit"),
    ),
    Case(
        "scheduler preemption, pod Failed with 143: not counted",
        [w(0).running(), w(1).failed(143).disrupted("PreemptionByScheduler")],
        counted=False,
        reason="Disrupted",
        message_has=("PreemptionByScheduler",),
    ),
    Case(
        "a peer dying of the disruption first does not make it count",
        [w(0).failed(201, finished_at=3), w(1).running().disrupted().terminating(10)],
        counted=False,
        reason="Disrupted",
    ),
    Case(
        "a disruption under restartPolicy Never still restarts",
        [w(0).running(), w(1).failed(143).disrupted("DeletionByTaintManager")],
        policy={"restartPolicy": "Never"},
        counted=False,
        reason="Disrupted",
    ),
    Case(
        "a member lost with its node (no exit code) is a disruption",
        [w(0).running(), w(1).running().terminating(5)],
        lost=frozenset({"j-worker-1"}),
        counted=False,
        reason="Disrupted",
        message_has=("node lost",),
    ),
    Case(
        "the same member lost on a healthy node (user delete) counts",
        [w(0).running(), w(1).running().terminating(5)],
    ),
    Case(
        "rule Count on DisruptionTarget charges evictions",
        [w(0).running(), w(1).running().disrupted().terminating(5)],
        policy=rules({"action": "Count", **DISRUPTION_RULE}),
        message_has=("podFailurePolicy rule 0 (Count)",),
    ),
    Case(
        "rule FailJob on DisruptionTarget fails the job",
        [w(0).running(), w(1).failed(143).disrupted()],
        policy=rules({"action": "FailJob", **DISRUPTION_RULE}),
        retryable=False,
        reason="PodFailedPermanent",
    ),
    Case(
        "rule Ignore on exit code 3 restarts a permanent code without counting",
        [w(0).running(), w(1).failed(3)],
        policy=rules({"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}),
        counted=False,
    ),
    Case(
        "rule FailJob NotIn [137] fails exit 139",
        [w(0).running(), w(1).failed(139)],
        policy=rules({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [137]}}),
        retryable=False,
        reason="PodFailedPermanent",
    ),
    Case(
        "rule NotIn does not match a listed code: restartPolicy decides",
        [w(0).running(), w(1).failed(137)],
        policy=rules({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [137]}}),
    ),
    Case(
        "rule on another container's exit code does not match the trainer's",
        [w(0).running(), w(1).failed(3)],
        policy=rules(
            {
                "action": "Ignore",
                "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [3]},
            }
        ),
        retryable=False,
        reason="PodFailedPermanent",
    ),
    Case(
        "first matching rule wins",
        [w(0).running(), w(1).failed(3)],
        policy=rules(
            {"action": "Count", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
        ),
    ),
    Case(
        "exit 200 keeps its own reason when counted",
        [w(0).running(), w(1).failed(200)],
        reason="RendezvousTimeout",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gang_verdict(case: Case) -> None:
    objs = [p.obj() for p in case.pods]
    policy = RunPolicy.model_validate(case.policy)
    gv = judge_gang(gang_failures(objs, 0, MEMBERS, started=True), objs, policy, case.lost)
    assert gv is not None
    assert (gv.verdict.retryable, gv.counted, gv.verdict.reason) == (
        case.retryable,
        case.counted,
        case.reason,
    ), gv.verdict.message
    for text in case.message_has:
        assert text in gv.verdict.message


def test_no_failures_no_verdict() -> None:
    objs = [w(0).running().obj()]
    assert judge_gang([], objs, RunPolicy()) is None


def test_disruption_reason_needs_status_true() -> None:
    pod = w(0).running().disrupted().obj()
    assert disruption_of(pod) == "EvictionByEvictionAPI"
    pod["status"]["conditions"][-1]["status"] = "False"
    assert disruption_of(pod) is None


def test_rule_needs_exactly_one_matcher() -> None:
    with pytest.raises(ValueError, match="exactly one of onExitCodes and onPodConditions"):
        RunPolicy.model_validate(rules({"action": "Ignore"}))


def node(name: str, ready: str = "True", taint: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"taints": [{"key": taint, "effect": "NoExecute"}]} if taint else {},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_lost_nodes() -> None:
    nodes = [
        node("ok"),
        node("down", "False"),
        node("silent", "Unknown"),
        node("oos", taint=OUT_OF_SERVICE_TAINT),
        node("tainted", taint="node.kubernetes.io/unreachable"),
    ]
    wanted = ["ok", "down", "silent", "oos", "tainted", "gone"]
    assert lost_nodes(wanted, nodes) == {"down", "silent", "oos", "gone"}


def test_nodes_the_cache_calls_ready_are_confirmed_by_the_api_server() -> None:
    # The API server's word, newer than the cache's: "late" went NotReady, "gone" was
    # deleted, "ok" is still Ready.
    live = {"ok": node("ok"), "late": node("late", "Unknown")}
    asked: list[str] = []

    def read(name: str) -> dict[str, Any] | None:
        asked.append(name)
        return live.get(name)

    assert confirmed_lost({"ok", "late", "gone"}, read, limit=8) == {"late", "gone"}
    assert sorted(asked) == ["gone", "late", "ok"]
    asked.clear()
    # A mass deletion costs at most `limit` reads a pass (the first names, in order).
    assert confirmed_lost({"ok", "late", "gone"}, read, limit=1) == {"gone"}
    assert asked == ["gone"]
