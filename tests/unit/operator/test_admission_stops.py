"""The planner's side of a gang the admission stops (lifecycle step 4b) and of an admission
that can never be applied: one episode is one preemption and one Event however long the
pods take to go, the deadline clock restarts as for a suspended batch/v1 Job, a
deactivation keeps the job Suspended without counting as a preemption, and a verdict that
fails the job fails it with the backend's reason."""

from __future__ import annotations

from unit.operator.builders import a_pod, iso
from unit.operator.test_admission_lifecycle import DDP, after, cond, pod, run

READY = (pod(0, ready=True), pod(1, ready=True))


def terminating(index: int):  # type: ignore[no-untyped-def]
    b = a_pod(DDP, "worker", index).running()
    b._pod["metadata"]["deletionTimestamp"] = iso(12)
    return b


def test_one_eviction_is_one_preemption_and_one_event_while_the_pods_terminate() -> None:
    running = after(after(DDP, now=0), *READY, now=5)
    first = run(running, *READY, now=10, stop="Kueue evicted it (Preempted): by urgent")
    assert first.status["admission"]["preemptions"] == 1
    assert [e.reason for e in first.events] == ["Preempted"]
    stopping = running.copy().with_full_status(first.status)
    # The backend says it on every pass until the pods are gone (a checkpoint takes time).
    for now in (12, 15, 20):
        again = run(stopping, terminating(0), terminating(1), now=now, stop="evicted")
        assert again.status["admission"]["preemptions"] == 1
        assert not again.events and again.status["phase"] == "Suspended"
        stopping = stopping.copy().with_full_status(again.status)
    # Admitted again, running, and evicted again: a second episode counts.
    started = after(stopping, now=30)
    rerunning = after(started, *(p for p in (pod(0, ready=True), pod(1, ready=True))), now=35)
    assert rerunning.obj()["status"]["phase"] == "Running"
    second = run(rerunning, *READY, now=40, stop="evicted")
    assert second.status["admission"]["preemptions"] == 2
    assert [e.reason for e in second.events] == ["Preempted"]


def test_time_spent_stopped_does_not_count_toward_the_deadline() -> None:
    job = DDP.copy().with_run_policy(activeDeadlineSeconds=100)
    running = after(after(job, now=0), *READY, now=5)
    assert running.obj()["status"]["startTime"] == iso(0)
    stopped = run(running, *READY, now=10, stop="preempted by urgent")
    assert "startTime" not in stopped.status or stopped.status["startTime"] is None
    waiting = running.copy().with_full_status(stopped.status)
    readmitted = run(waiting, now=200)
    assert readmitted.status["phase"] == "Starting"
    assert readmitted.status["startTime"] == iso(200)
    later = run(waiting.copy().with_full_status(readmitted.status), *READY, now=250)
    assert later.status["phase"] != "Failed"


def test_a_deactivation_stops_the_job_for_good_without_counting_a_preemption() -> None:
    running = after(after(DDP, now=0), *READY, now=5)
    said = "Kueue deactivated its Workload w (The workload is deactivated; by Kueue or an admin)"
    p = run(running, *READY, now=10, stop=said, stop_reason="Deactivated")
    assert p.status["phase"] == "Suspended" and p.delete_pods == ["j-worker-0", "j-worker-1"]
    assert (
        cond(p, "Suspended")["reason"] == "Deactivated" and cond(p, "Suspended")["message"] == said
    )
    assert "preemptions" not in p.status["admission"]
    assert [e.reason for e in p.events] == ["Deactivated"]
    stopped = running.copy().with_full_status(p.status)
    later = run(stopped, now=60, stop=said, stop_reason="Deactivated")
    assert later.status["phase"] == "Suspended" and not later.events and later.create == []


def test_an_admission_that_can_never_be_applied_fails_the_job() -> None:
    queued = after(DDP, admitted=False)
    message = "Kueue's admission cannot be applied to the pods: label a=2 conflicts with a=1"
    p = run(queued, now=5, admitted=False, fail=("AdmissionConflict", message))
    assert p.status["phase"] == "Failed" and p.create == []
    assert cond(p, "Failed")["reason"] == "AdmissionConflict"
    assert cond(p, "Failed")["message"] == message
