"""The planner and a gang that stops making progress (lifecycle step 8a): its step is
watched while Running, a still step past the deadline restarts the gang with reason Stalled
(counted against backoffLimit), and no other phase is ever judged."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from unit.operator.builders import JobBuilder, at, iso, pods
from unit.operator.planning import DDP, SETTINGS, SUPPORT, after, condition, ready, run

from dtjob_api.status import JobPhase
from dtjob_operator.admission.seam import AdmissionVerdict
from dtjob_operator.lifecycle import Event, Observed, Plan, plan


def running(**policy: Any) -> JobBuilder:
    """A 2-worker gang that became Running at t=5, with `policy` as its runPolicy."""
    job = DDP.copy().with_run_policy(**policy)
    return after(after(job, now=0), ready(0), ready(1), now=5)


def tick(job: JobBuilder, now: float, progress: dict[str, Any] | None = None) -> Plan:
    return run(job, ready(0), ready(1), now=now, progress=progress)


def report(job: JobBuilder, *steps: tuple[float, int], **extra: Any) -> JobBuilder:
    """The job after the trainer reported each (time, step), one pass per report."""
    for now, step in steps:
        job = job.copy().with_full_status(tick(job, now, {"step": step, **extra}).status)
    return job


def test_a_still_step_past_the_deadline_restarts_the_gang_as_stalled() -> None:
    job = report(running(progressDeadlineSeconds=120), (10, 1), (20, 2),
                 lastCheckpointStep=1)  # fmt: skip
    assert job.obj()["status"]["progressWatch"] == {
        "gang": 0, "step": 2, "since": iso(20), "lastMoveTime": iso(20),
        "secondsPerStep": 10.0, "deadlineSeconds": 120,
    }  # fmt: skip
    quiet = tick(job, 139)  # the trainer writes nothing more
    assert quiet.status["phase"] == "Running" and quiet.requeue_after == 1
    p = tick(job, 140)
    message = (
        "gang restart 1 of at most 3 in 10s, from the last checkpoint (step 1): training "
        "stalled: step 2 has not moved for 120s (deadline 120s, "
        "runPolicy.progressDeadlineSeconds)"
    )
    assert p.status["phase"] == "Restarting"
    assert (p.status["restarts"], p.status["countedRestarts"]) == (1, 1)
    assert condition(p, "Restarting")["reason"] == "Stalled"
    assert condition(p, "Restarting")["message"] == message
    assert condition(p, "Running") == {**condition(p, "Running"), "status": "False",
                                       "reason": "Stalled"}  # fmt: skip
    assert p.status["reason"] == "Stalled"
    assert p.events == [Event("Warning", "Stalled", message)]
    assert p.delete_pods == ["j-worker-0", "j-worker-1"]
    # Stuck ranks cannot checkpoint on SIGTERM: a short grace, not the pods' 60 s.
    assert p.delete_grace_seconds == 5
    assert "progressWatch" not in p.status


def test_the_learned_deadline_and_the_culprit_are_in_the_message() -> None:
    job = report(running(), (10, 100), (12, 101), (14, 102), (16, 103))
    assert job.obj()["status"]["progressWatch"]["deadlineSeconds"] == 600
    observed = Observed(
        job=job.obj(), pods=pods(ready(0), ready(1)), children=SUPPORT,
        progress={"step": 103}, now=at(16 + 600),
        admission=AdmissionVerdict(admitted=True),
        stall_evidence="rank 1 (pod j-worker-1 on node n7) waits in ncclAllReduce",
    )  # fmt: skip
    p = plan(observed, SETTINGS)
    said = condition(p, "Restarting")["message"]
    assert said.endswith(
        "training stalled: step 103 has not moved for 600s (deadline 600s, the least learned "
        "deadline (10 x 2.0s per step is shorter)); rank 1 (pod j-worker-1 on node n7) "
        "waits in ncclAllReduce"
    )
    assert plan(replace(observed, now=at(16 + 599)), SETTINGS).status["phase"] == "Running"


def test_past_backoff_limit_a_stall_fails_the_job() -> None:
    job = report(running(progressDeadlineSeconds=60, backoffLimit=0), (10, 1), (20, 2))
    p = tick(job, 80)
    assert p.status["phase"] == "Failed"
    failed = condition(p, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == (
        "the gang failed again after 0 restarts (backoffLimit 0): training stalled: step 2 "
        "has not moved for 60s (deadline 60s, runPolicy.progressDeadlineSeconds)"
    )


def test_the_restarted_gang_is_watched_anew() -> None:
    job = report(running(progressDeadlineSeconds=60), (10, 1), (20, 2))
    restarting = job.copy().with_full_status(tick(job, 80).status)
    starting = after(restarting, now=91)  # backoff over, old pods gone: gang 1 created
    back = after(starting, ready(0, 1), ready(1, 1), now=95)
    status = back.obj()["status"]
    assert status["phase"] == "Running"
    # The status still says step 2 (the old gang's report): a baseline, not progress.
    assert status["progressWatch"] == {"gang": 1, "step": 2, "since": iso(95)}
    p = run(back, ready(0, 1), ready(1, 1), now=10_000, progress={"step": 2})
    assert p.status["phase"] == "Running" and p.events == []


def test_a_suspended_job_is_never_declared_stalled() -> None:
    job = report(running(progressDeadlineSeconds=60), (10, 1), (20, 2))
    p = run(job.copy().suspended(), ready(0), ready(1), now=10_000, progress={"step": 2})
    assert p.status["phase"] == "Suspended"
    assert [e.reason for e in p.events] == ["Suspended"]
    assert "progressWatch" not in p.status
    # A status still holding an old watch (an operator that stopped mid-way) changes nothing.
    held = job.copy().suspended().with_status(phase="Suspended")
    p = run(held, now=10_000, progress={"step": 2})
    assert p.status["phase"] == "Suspended" and p.status["restarts"] == 0
    resumed = held.copy().suspended(False)
    p = run(resumed, now=20_000, progress={"step": 2})
    assert p.status["phase"] != "Restarting" and "progressWatch" not in p.status


def test_checkpointing_stops_the_clock() -> None:
    job = report(running(progressDeadlineSeconds=60), (10, 1), (20, 2))
    paused = report(job, (70, 2), activity="checkpointing")
    assert "since" not in paused.obj()["status"]["progressWatch"]
    p = tick(paused, 10_000, {"step": 2, "activity": "checkpointing"})
    assert p.status == paused.obj()["status"]  # a pause changes nothing while it lasts
    assert p.requeue_after == SETTINGS.progress_sync_seconds
    resumed = report(paused, (10_000, 2))  # the same step, training again: the clock starts
    assert tick(resumed, 10_059).status["phase"] == "Running"
    assert tick(resumed, 10_060).status["phase"] == "Restarting"


def test_a_trainer_without_progress_is_never_judged() -> None:
    job = running(progressDeadlineSeconds=10)
    for now in (100, 10_000, 1_000_000):
        p = tick(job, now)
        assert p.status["phase"] == "Running" and p.events == []
        assert p.requeue_after == SETTINGS.progress_sync_seconds


def test_the_requeue_comes_when_the_deadline_would_pass() -> None:
    job = report(running(progressDeadlineSeconds=60), (10, 1), (20, 2))
    assert tick(job, 77).requeue_after == 3  # the deadline, before the 5 s progress floor
    assert tick(job, 30).requeue_after == SETTINGS.progress_sync_seconds
    assert JobPhase(tick(job, 77).status["phase"]) == JobPhase.RUNNING


def test_without_the_executors_evidence_rank_0s_heartbeat_summary_names_the_culprit() -> None:
    job = report(running(progressDeadlineSeconds=60), (10, 1), (20, 2))
    gang = pods(ready(0), ready(1))
    for member in gang:  # the operator's rank annotation and the node the pod ran on
        index = int(member["metadata"]["name"].rsplit("-", 1)[1])
        member["metadata"].setdefault("annotations", {})["dtjob.io/rank"] = str(index)
        member.setdefault("spec", {})["nodeName"] = f"n{index}"
    summary = {"behind": [{"rank": 1, "step": 2, "lastStepAgo": 61, "waitingIn": "sleep (f.py:9)"}]}
    observed = Observed(
        job=job.obj(), pods=gang, children=SUPPORT,
        progress={"step": 2, "ranks": summary}, now=at(80),
        admission=AdmissionVerdict(admitted=True),
    )  # fmt: skip
    said = condition(plan(observed, SETTINGS), "Restarting")["message"]
    assert said.endswith(
        "; rank 1 (pod j-worker-1 on node n1) stopped first, at step 2, 61s ago, "
        "waiting in sleep (f.py:9)"
    ), said


def test_a_straggler_is_said_once_per_episode() -> None:
    slow = {"ranks": {"stragglers": [{"rank": 1, "slowdown": 2.4}, {"rank": 0, "slowdown": 1.6}]}}
    job = report(running(), (10, 1))
    first = tick(job, 12, {"step": 2, **slow})
    said = [e for e in first.events if e.reason == "Straggler"]
    assert [e.message for e in said] == [  # (these pods carry no dtjob.io/rank: no pod)
        "rank 1 straggles: 2.4x the CPU time per step of the other ranks; shown, not acted on"
    ]
    assert first.status["progressWatch"]["straggler"] == 1
    job = job.copy().with_full_status(first.status)
    again = tick(job, 14, {"step": 3, **slow})
    assert not [e for e in again.events if e.reason == "Straggler"]  # the same episode
    job = job.copy().with_full_status(again.status)
    gone = tick(job, 16, {"step": 4})
    assert "straggler" not in gone.status["progressWatch"]
    back = tick(job.copy().with_full_status(gone.status), 18, {"step": 5, **slow})
    assert [e.reason for e in back.events] == ["Straggler"]  # a new episode
