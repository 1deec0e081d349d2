"""Status computation: replica counts, READY column, condition transitions, progress."""

from __future__ import annotations

import pytest
from unit.operator.builders import a_job, a_pod, at, iso, pods

from dtjob_api.status import JobPhase
from dtjob_operator.status import (
    ConditionUpdate,
    StatusDecision,
    apply_conditions,
    compute_status,
    count_replicas,
    progress_of,
    ready_column,
    short_number,
)

PS = a_job().with_strategy("ParameterServer").with_workers(4, gpus=1).with_ps(2)


def test_replica_counts_per_role() -> None:
    gang = pods(
        a_pod(PS, "worker", 0).running().ready(),
        a_pod(PS, "worker", 1).running(),  # running, not ready yet
        a_pod(PS, "worker", 2).succeeded(),
        a_pod(PS, "worker", 3).failed(exit_code=137),
        a_pod(PS, "ps", 0),  # pending
    )
    assert count_replicas(PS.job().spec, gang) == {
        "worker": {"total": 4, "active": 2, "ready": 1, "succeeded": 1, "failed": 1},
        "ps": {"total": 2, "active": 1, "ready": 0, "succeeded": 0, "failed": 0},
    }


def test_replica_counts_ignore_pods_of_roles_the_spec_lacks() -> None:
    ddp = a_job().with_workers(1)
    stray = a_pod(ddp, "ps", 0).running().ready().obj()
    assert count_replicas(ddp.job().spec, [stray]) == {
        "worker": {"total": 1, "active": 0, "ready": 0, "succeeded": 0, "failed": 0}
    }


def test_ready_column_sums_all_roles() -> None:
    gang = pods(a_pod(PS, "worker", 0).running().ready(), a_pod(PS, "ps", 1).running().ready())
    assert ready_column(count_replicas(PS.job().spec, gang)) == "2/6"


PRIOR = [
    {
        "type": "Admitted",
        "status": "True",
        "reason": "Admitted",
        "message": "",
        "lastTransitionTime": iso(0),
    },
    {
        "type": "Running",
        "status": "False",
        "reason": "PodsNotReady",
        "message": "0/2 pods ready",
        "lastTransitionTime": iso(1),
    },
]


def test_condition_keeps_its_transition_time_while_status_is_unchanged() -> None:
    update = ConditionUpdate("Running", False, "PodsNotReady", "1/2 pods ready")
    result = apply_conditions(PRIOR, [update], at(50), observed_generation=3)
    running = result[1]
    assert running["lastTransitionTime"] == iso(1)
    assert running["message"] == "1/2 pods ready"
    assert running["observedGeneration"] == 3


def test_condition_transition_time_moves_when_status_flips() -> None:
    update = ConditionUpdate("Running", True, "PodsReady", "all 2 pods are ready")
    running = apply_conditions(PRIOR, [update], at(50), observed_generation=None)[1]
    assert (running["status"], running["reason"], running["lastTransitionTime"]) == (
        "True",
        "PodsReady",
        iso(50),
    )


def test_new_conditions_are_appended_and_order_is_kept() -> None:
    update = ConditionUpdate("Restarting", True, "Preempted", "restart 1")
    result = apply_conditions(PRIOR, [update], at(9), observed_generation=None)
    assert [c["type"] for c in result] == ["Admitted", "Running", "Restarting"]
    assert result[2]["lastTransitionTime"] == iso(9)
    assert PRIOR[1]["message"] == "0/2 pods ready"  # the input is not modified


def test_progress_drops_unknown_keys_and_ignores_garbage() -> None:
    reported = {"step": 10, "totalSteps": 100, "loss": 0.5, "gpuTemperature": 80}
    # lossShort is the operator's (kubectl get's LOSS column), even if a trainer sends one.
    assert progress_of({**reported, "lossShort": "9"}) == {
        "step": 10,
        "totalSteps": 100,
        "loss": 0.5,
        "lossShort": "0.5000",
    }
    assert progress_of({"step": "ten"}) is None
    assert progress_of({}) is None
    assert progress_of(None) is None


def test_compute_status_golden() -> None:
    ddp = a_job().with_workers(2, gpus=1)
    gang = pods(a_pod(ddp, "worker", 0).running().ready(), a_pod(ddp, "worker", 1).running())
    decision = StatusDecision(
        phase=JobPhase.STARTING,
        conditions=[ConditionUpdate("Running", False, "PodsNotReady", "1/2 pods ready")],
        restarts=1,
        counted_restarts=1,
        start_time=at(0),
        last_restart_time=at(30),
        gang=gang,
    )
    status = compute_status(
        {}, ddp.job().spec, decision, now=at(40), observed_generation=2, progress={"step": 7}
    )
    assert status == {
        "phase": "Starting",
        "strategy": "DataParallel",
        "conditions": [
            {
                "type": "Running",
                "status": "False",
                "reason": "PodsNotReady",
                "message": "1/2 pods ready",
                "lastTransitionTime": iso(40),
                "observedGeneration": 2,
            }
        ],
        "replicaStatuses": {
            "worker": {"total": 2, "active": 2, "ready": 1, "succeeded": 0, "failed": 0}
        },
        "reason": "PodsNotReady",
        "ready": "1/2",
        "restarts": 1,
        "countedRestarts": 1,
        "startTime": iso(0),
        "lastRestartTime": iso(30),
        "progress": {"step": 7},
        "observedGeneration": 2,
    }


def test_prior_progress_is_kept_when_nothing_new_was_reported() -> None:
    prior = {"progress": {"step": 40, "loss": 0.1}}
    decision = StatusDecision(phase=JobPhase.RUNNING)
    status = compute_status(
        prior, None, decision, now=at(0), observed_generation=None, progress=None
    )
    assert status["progress"] == {"step": 40, "loss": 0.1, "lossShort": "0.1000"}
    assert "replicaStatuses" not in status or status["replicaStatuses"] == {}
    assert "ready" not in status


@pytest.mark.parametrize(
    ("loss", "shown"),
    [(0.38504165410995483, "0.3850"), (12.3456, "12.35"), (2.0, "2.000"), (0.0, "0"),
     (1.2345e-5, "1.234e-05"), (123456.7, "1.235e+05"), (float("nan"), "nan")],
)  # fmt: skip
def test_the_loss_column_shows_four_significant_digits(loss: float, shown: str) -> None:
    assert short_number(loss) == shown
