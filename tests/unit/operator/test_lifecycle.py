"""The lifecycle planner, scenario by scenario. Prior states are produced by the planner
itself (one pass feeds the next), so the tables exercise real transitions."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from unit.operator.builders import JobBuilder, PodBuilder, a_job, a_pod
from unit.operator.planning import (
    DDP,
    GANG_0,
    RESTARTING,
    RUNNING,
    STARTING,
    SUPPORT,
    after,
    condition,
    created,
    ready,
    run,
    w,
)


@dataclass
class Case:
    name: str
    job: JobBuilder
    observed: list[PodBuilder] = field(default_factory=list)
    now: float = 0
    phase: str = ""
    creates: list[str] | None = None
    deletes: list[str] = field(default_factory=list)
    restarts: int = 0
    condition: tuple[str, str, str] | None = None
    message_has: tuple[str, ...] = ()
    events: list[str] = field(default_factory=list)
    requeue: float | None = None
    children: frozenset[tuple[str, str]] = SUPPORT


PS = a_job().with_strategy("ParameterServer").with_workers(2).with_ps(1)
PS_RUNNING = after(
    after(PS, now=0),
    w(0, job=PS).running().ready(),
    w(1, job=PS).running().ready(),
    a_pod(PS, "ps", 0).running().ready(),
    now=5,
)

FACTORY_ERROR = "trainer.model.factory: models:build raised ValueError: width 3 must be even"
CUSTOM_COMMAND = DDP.copy().with_trainer(command=["python", "train.py"])
CUSTOM_COMMAND_RUNNING = after(
    after(CUSTOM_COMMAND, now=0),
    w(0, job=CUSTOM_COMMAND).running().ready(),
    w(1, job=CUSTOM_COMMAND).running().ready(),
    now=5,
)

CASES = [
    Case(
        "fresh job creates every child, support objects first",
        DDP,
        children=frozenset(),
        phase="Starting",
        creates=[
            "ServiceAccount/j-trainer",
            "Role/j-progress",
            "RoleBinding/j-progress",
            "ConfigMap/j-config",
            "ConfigMap/j-progress",
            "ConfigMap/j-history",
            "Service/j",
            *GANG_0,
        ],
        condition=("Running", "False", "PodsNotReady"),
        events=["EphemeralCheckpoints", "Created"],
        requeue=5,
    ),
    Case(
        "operator restarted mid-creation: only the missing pod is created",
        DDP,
        [w(0)],
        phase="Starting",
        creates=["Pod/j-worker-1"],
        events=["EphemeralCheckpoints", "Created"],
        requeue=5,
    ),
    Case(
        "some pods ready: still Starting",
        STARTING,
        [ready(0), w(1).running()],
        now=3,
        phase="Starting",
        creates=[],
        condition=("Running", "False", "PodsNotReady"),
        message_has=("1/2 pods ready",),
        requeue=5,
    ),
    Case(
        "all pods ready: Running",
        STARTING,
        [ready(0), ready(1)],
        now=5,
        phase="Running",
        creates=[],
        condition=("Running", "True", "PodsReady"),
        events=["PodsReady"],
        requeue=5,
    ),
    Case(
        "worker exit 137: gang restart, every pod deleted",
        RUNNING,
        [ready(0), w(1).failed(exit_code=137, finished_at=20)],
        now=20,
        phase="Restarting",
        creates=[],
        deletes=["j-worker-0", "j-worker-1"],
        restarts=1,
        condition=("Restarting", "True", "PodFailedRetryable"),
        message_has=("j-worker-1", "code 137", "restart 1 of at most 3 in 10s"),
        events=["PodFailedRetryable"],
        requeue=10,
    ),
    Case(
        "restart waits for the backoff",
        RESTARTING,
        now=25,
        phase="Restarting",
        creates=[],
        restarts=1,
        requeue=5,
    ),
    Case(
        "restart waits for old pods to be gone (same names)",
        RESTARTING,
        [w(0).running().terminating(20), w(1).failed(137).terminating(20)],
        now=40,
        phase="Restarting",
        creates=[],
        restarts=1,
        requeue=10,
    ),
    Case(
        "backoff over and old pods gone: the next generation is created",
        RESTARTING,
        now=30,
        phase="Starting",
        creates=GANG_0,
        restarts=1,
        events=["Created"],
        requeue=5,
    ),
    Case(
        "worker exit 1: Failed at once, the running peer is cleaned up",
        RUNNING,
        [ready(0), w(1).failed(exit_code=1, finished_at=20)],
        now=20,
        phase="Failed",
        creates=[],
        deletes=["j-worker-0"],
        condition=("Failed", "True", "PodFailedPermanent"),
        message_has=("pod j-worker-1 exited with code 1", "permanent under restartPolicy ExitCode"),
        events=["PodFailedPermanent"],
    ),
    Case(
        "the bundled trainer's exit 2 (a factory raised): InvalidSpec with its message",
        RUNNING,
        [ready(0), w(1).failed(exit_code=2, finished_at=20, message=FACTORY_ERROR)],
        now=20,
        phase="Failed",
        creates=[],
        deletes=["j-worker-0"],
        condition=("Failed", "True", "InvalidSpec"),
        message_has=("invalid job config", FACTORY_ERROR),
        events=["InvalidSpec"],
    ),
    Case(
        "a custom command's exit 2 is its own: PodFailedPermanent",
        CUSTOM_COMMAND_RUNNING,
        [
            w(0, job=CUSTOM_COMMAND).running().ready(),
            w(1, job=CUSTOM_COMMAND).failed(2, finished_at=20),
        ],
        now=20,
        phase="Failed",
        creates=[],
        deletes=["j-worker-0"],
        condition=("Failed", "True", "PodFailedPermanent"),
        events=["PodFailedPermanent"],
    ),
    Case(
        "earliest failure decides: a kill first means restart",
        RUNNING,
        [w(0).failed(1, finished_at=25), w(1).failed(137, finished_at=20)],
        now=30,
        phase="Restarting",
        deletes=["j-worker-0", "j-worker-1"],
        restarts=1,
        condition=("Restarting", "True", "PodFailedRetryable"),
        events=["PodFailedRetryable"],
        requeue=10,
    ),
    Case(
        "a lost peer is a consequence: the permanent failure decides though it ended later",
        RUNNING,
        [w(0).failed(3, finished_at=25), w(1).failed(201, finished_at=20)],
        now=30,
        phase="Failed",
        creates=[],
        deletes=[],  # both finished: failed pods stay for their logs (cleanPodPolicy Running)
        condition=("Failed", "True", "PodFailedPermanent"),
        message_has=("pod j-worker-0 exited with code 3",),
        events=["PodFailedPermanent"],
    ),
    Case(
        "evicted worker: gang restart",
        RUNNING,
        [ready(0), w(1).evicted()],
        now=20,
        phase="Restarting",
        restarts=1,
        deletes=["j-worker-0", "j-worker-1"],
        message_has=("Evicted",),
        events=["PodFailedRetryable"],
        requeue=10,
    ),
    Case(
        "a running member deleted from outside: gang restart",
        RUNNING,
        [ready(0), ready(1).terminating(20)],
        now=20,
        phase="Restarting",
        restarts=1,
        deletes=["j-worker-0"],
        message_has=("j-worker-1", "deleted or gone"),
        events=["PodFailedRetryable"],
        requeue=10,
    ),
    Case(
        "a running member vanished: gang restart",
        RUNNING,
        [ready(0)],
        now=20,
        phase="Restarting",
        restarts=1,
        creates=[],
        deletes=["j-worker-0"],
        events=["PodFailedRetryable"],
        requeue=10,
    ),
    Case(
        "backoffLimit 0: the first retryable failure fails the job",
        after(after(DDP.copy().with_run_policy(backoffLimit=0)), ready(0), ready(1), now=5),
        [ready(0), w(1).failed(exit_code=143)],
        now=20,
        phase="Failed",
        condition=("Failed", "True", "BackoffLimitExceeded"),
        deletes=["j-worker-0"],
        events=["BackoffLimitExceeded"],
    ),
    Case(
        "deadline passed: Failed and every running pod deleted",
        after(after(DDP.copy().with_run_policy(activeDeadlineSeconds=60)), ready(0), ready(1)),
        [ready(0), ready(1)],
        now=60,
        phase="Failed",
        condition=("Failed", "True", "DeadlineExceeded"),
        deletes=["j-worker-0", "j-worker-1"],
        events=["DeadlineExceeded"],
    ),
    Case(
        "deadline ahead: woken up exactly at it",
        after(after(DDP.copy().with_run_policy(activeDeadlineSeconds=60)), ready(0), ready(1)),
        [ready(0), ready(1)],
        now=58,
        phase="Running",
        requeue=2,
    ),
    Case(
        "suspend: pods deleted, phase Suspended",
        RUNNING.copy().suspended(),
        [ready(0), ready(1)],
        now=30,
        phase="Suspended",
        creates=[],
        deletes=["j-worker-0", "j-worker-1"],
        condition=("Suspended", "True", "Suspended"),
        events=["Suspended"],
    ),
    Case(
        "ParameterServer success: Succeeded and the server stopped",
        PS_RUNNING,
        [w(0, job=PS).succeeded(), w(1, job=PS).succeeded(), a_pod(PS, "ps", 0).running()],
        now=90,
        phase="Succeeded",
        creates=[],
        deletes=["j-ps-0"],
        condition=("Succeeded", "True", "AllWorkersSucceeded"),
        events=["AllWorkersSucceeded"],
    ),
    Case(
        "admission withheld: Queued, no pods",
        DDP,
        children=frozenset(SUPPORT),
        phase="Queued",
        creates=[],
        condition=("Admitted", "False", "WaitingForAdmission"),
        events=["EphemeralCheckpoints", "WaitingForAdmission"],
        requeue=10,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scenario(case: Case) -> None:
    p = run(
        case.job,
        *case.observed,
        now=case.now,
        children=case.children,
        admitted=case.phase != "Queued",
    )
    assert p.status["phase"] == case.phase
    if case.creates is not None:
        assert created(p) == case.creates
    assert p.delete_pods == case.deletes
    assert p.status.get("restarts", 0) == case.restarts
    assert not p.delete_job
    if case.condition:
        type_, status, reason = case.condition
        c = condition(p, type_)
        assert (c["status"], c["reason"]) == (status, reason)
        for text in case.message_has:
            assert text in c["message"]
    assert [e.reason for e in p.events] == case.events
    assert p.requeue_after == case.requeue
