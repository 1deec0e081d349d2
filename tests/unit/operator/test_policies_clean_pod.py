"""cleanPodPolicy and the finished-job actions built on it."""

from __future__ import annotations

import pytest
from unit.operator.builders import a_job, a_pod, at, pods

from dtjob_api.spec import RunPolicy
from dtjob_operator.policies.clean_pod_policy import pods_to_clean
from dtjob_operator.policies.finished import finished_actions, lenient_run_policy

JOB = a_job().with_strategy("ParameterServer").with_workers(2).with_ps(1)
OBSERVED = pods(
    a_pod(JOB, "worker", 0).succeeded(),
    a_pod(JOB, "worker", 1).failed(exit_code=1),
    a_pod(JOB, "ps", 0).running().ready(),
    a_pod(JOB, "worker", 0, generation=1).running().terminating(),
)

CLEAN = [
    ("All", ["j-ps-0", "j-worker-0", "j-worker-1"]),
    ("Running", ["j-ps-0"]),
    ("None", []),
]


@pytest.mark.parametrize(("policy", "deleted"), CLEAN)
def test_pods_to_clean(policy: str, deleted: list[str]) -> None:
    # Pods already being deleted are never listed again.
    assert pods_to_clean(OBSERVED, policy) == deleted


def test_success_stops_running_pods_even_under_clean_policy_none() -> None:
    policy = RunPolicy(cleanPodPolicy="None")
    actions = finished_actions(OBSERVED, True, policy, at(0), at(1))
    assert actions.delete_pods == ["j-ps-0"]
    assert finished_actions(OBSERVED, False, policy, at(0), at(1)).delete_pods == []


TTL = [
    ("no ttl", None, 50, False, None),
    ("before expiry", 30, 10, False, 20.0),
    ("at expiry", 30, 30, True, None),
]


@pytest.mark.parametrize(
    ("ttl", "now", "delete_job", "requeue"), [t[1:] for t in TTL], ids=[t[0] for t in TTL]
)
def test_finished_ttl(ttl: int | None, now: float, delete_job: bool, requeue: float | None) -> None:
    policy = RunPolicy(ttlSecondsAfterFinished=ttl)
    actions = finished_actions([], True, policy, at(0), at(now))
    assert (actions.delete_job, actions.requeue_after) == (delete_job, requeue)


def test_lenient_run_policy_survives_a_broken_spec() -> None:
    broken = {"strategy": {"type": "Nope"}, "runPolicy": {"ttlSecondsAfterFinished": 7}}
    assert lenient_run_policy(broken).ttlSecondsAfterFinished == 7
    assert lenient_run_policy({"runPolicy": {"backoffLimit": -1}}) == RunPolicy()
    assert lenient_run_policy(None) == RunPolicy()
