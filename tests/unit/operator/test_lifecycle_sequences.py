"""The lifecycle planner over several passes (restart, suspend/resume, TTL, clean-up) and
the properties every plan keeps (idempotence, final phases, never stuck in Restarting)."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.builders import JobBuilder, PodBuilder, a_job, at, iso, pods
from unit.operator.planning import (
    DDP,
    GANG_0,
    RESTARTING,
    RUNNING,
    SETTINGS,
    SUPPORT,
    after,
    condition,
    created,
    ready,
    run,
    w,
)

from dtjob_operator.lifecycle import Observed, Plan, plan
from dtjob_operator.policies.create_errors import CreateError


def env_of(manifest: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in manifest["spec"]["containers"][0]["env"]}


def test_restart_creates_generation_1_and_returns_to_running() -> None:
    p = run(RESTARTING, now=30)
    assert p.status["lastRestartTime"] == iso(20)
    for pod in p.create:
        assert pod["metadata"]["labels"]["dtjob.io/generation"] == "1"
        assert env_of(pod)["DTJ_GANG_GENERATION"] == "1"
    starting = RESTARTING.copy().with_full_status(p.status)
    # Old-generation leftovers do not count; the new gang does.
    p = run(starting, w(0, 0).failed(143).terminating(20), ready(0, 1), ready(1, 1), now=35)
    assert p.status["phase"] == "Running"
    assert condition(p, "Restarting")["status"] == "False"
    assert condition(p, "Restarting")["reason"] == "PodsReady"
    assert p.status["ready"] == "2/2" and p.status["restarts"] == 1
    assert p.status["startTime"] == iso(0)  # the job's start, not the restart's


def test_backoff_limit_counts_restarts_not_failures() -> None:
    job = DDP.copy().with_run_policy(backoffLimit=1, backoffSeconds=1)
    first = after(after(job), ready(0), ready(1), now=1)
    restarting = after(first, ready(0), w(1).failed(137, finished_at=2), now=2)
    restarted = after(after(restarting, now=5), ready(0, 1), ready(1, 1), now=6)
    assert restarted.obj()["status"]["phase"] == "Running"
    p = run(restarted, ready(0, 1), w(1, 1).failed(137, finished_at=7), now=7)
    assert p.status["phase"] == "Failed"
    assert condition(p, "Failed")["reason"] == "BackoffLimitExceeded"
    assert condition(p, "Restarting")["status"] == "False"
    assert p.status["restarts"] == 1
    assert "after 1 restarts (backoffLimit 1)" in condition(p, "Failed")["message"]


def test_suspend_then_resume_creates_a_fresh_gang() -> None:
    suspended = after(RUNNING.copy().suspended(), ready(0), ready(1), now=30)
    assert "startTime" not in suspended.obj()["status"]
    # Still suspended, pods on their way out: nothing more to do, nothing to announce.
    p = run(suspended, ready(0).terminating(30), w(1).failed(143).terminating(30), now=31)
    assert (p.delete_pods, p.events, p.status["phase"]) == ([], [], "Suspended")

    resumed = suspended.copy().suspended(False)
    # Old pods still terminating (exit 143 is their suspend, not a failure): wait.
    p = run(resumed, w(0).failed(143).terminating(30), now=40)
    assert p.status["phase"] == "Pending" and p.create == []
    assert p.status.get("restarts", 0) == 0
    assert [e.reason for e in p.events] == ["Resumed"]
    assert condition(p, "Suspended")["status"] == "False"
    assert p.requeue_after == SETTINGS.resync_seconds

    p = run(resumed, now=45)
    assert created(p) == GANG_0
    assert p.status["phase"] == "Starting" and p.status["startTime"] == iso(45)


def test_ttl_deletes_the_finished_job_after_its_time() -> None:
    job = DDP.copy().with_run_policy(ttlSecondsAfterFinished=30)
    running = after(after(job), ready(0), ready(1), now=5)
    p = run(running, w(0).succeeded(99), w(1).succeeded(100), now=100)
    assert p.status["phase"] == "Succeeded" and p.status["completionTime"] == iso(100)
    assert not p.delete_job and p.requeue_after == 30  # watchers see Succeeded first
    done = running.copy().with_full_status(p.status)

    p = run(done, w(0).succeeded(), w(1).succeeded(), now=110)
    assert (p.delete_job, p.requeue_after, p.status) == (False, 20, done.obj()["status"])
    p = run(done, w(0).succeeded(), w(1).succeeded(), now=130)
    assert p.delete_job and [e.reason for e in p.events] == ["TTLExpired"]


def test_a_finished_status_is_final_but_for_progress() -> None:
    failed = after(RUNNING, ready(0), w(1).failed(1, finished_at=20), now=20)
    prior = failed.obj()["status"]
    # A late pod change cannot move the job out of Failed.
    p = run(failed, w(0).succeeded(), w(1).failed(1), now=500, progress={"step": 80})
    assert p.status == {**prior, "progress": {"step": 80}}
    assert (p.create, p.events) == ([], [])


CLEAN = [("Running", []), ("All", ["j-worker-0", "j-worker-1"]), ("None", [])]


@pytest.mark.parametrize(("policy", "deleted"), CLEAN)
def test_clean_pod_policy_after_success(policy: str, deleted: list[str]) -> None:
    job = DDP.copy().with_run_policy(cleanPodPolicy=policy)
    running = after(after(job), ready(0), ready(1), now=5)
    p = run(running, w(0).succeeded(), w(1).succeeded(), now=60)
    assert p.status["phase"] == "Succeeded"
    assert p.delete_pods == deleted


def test_invalid_spec_fails_with_the_field_and_creates_nothing() -> None:
    job = a_job().with_strategy("Pipeline").with_workers(2)  # Pipeline needs stages
    p = run(job, children=frozenset())
    assert p.status["phase"] == "Failed"
    failed = condition(p, "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "spec.roles" in failed["message"]
    assert p.create == [] and p.status["completionTime"] == iso(0)
    assert [e.reason for e in p.events] == ["InvalidSpec"]


def test_unparsable_spec_fails_and_stops_its_pods() -> None:
    job = DDP.copy()
    job.spec["roles"]["worker"]["replicas"] = 0
    p = run(job, ready(0), w(1).failed(1))
    assert condition(p, "Failed")["reason"] == "InvalidSpec"
    assert "spec.roles.worker.replicas" in condition(p, "Failed")["message"]
    assert p.delete_pods == ["j-worker-0"]


def test_replanning_an_applied_plan_changes_nothing() -> None:
    """Idempotence: once the executor applied a plan, the next pass has nothing to do and
    computes the same status (so no status patch, no duplicate event)."""
    p1 = run(DDP, children=frozenset(), now=0)
    applied = DDP.copy().with_full_status(p1.status)
    p2 = run(applied, w(0), w(1), now=1)
    assert (p2.create, p2.delete_pods, p2.events) == ([], [], [])
    assert p2.status["conditions"] == p1.status["conditions"]  # times kept
    assert p2.status["replicaStatuses"]["worker"]["active"] == 2  # the pods now exist
    p2b = run(applied.copy().with_full_status(p2.status), w(0), w(1), now=2)
    assert p2b.status == p2.status and (p2b.create, p2b.events) == ([], [])

    running = after(applied, ready(0), ready(1), now=5)
    p3 = run(running, ready(0), ready(1), now=6)
    p4 = run(running, ready(0), ready(1), now=60)
    assert p3.status == p4.status == running.obj()["status"]
    assert (p4.create, p4.events) == ([], [])


def test_progress_is_copied_into_status() -> None:
    reported = {"step": 50, "totalSteps": 100, "loss": 0.25, "lastCheckpointStep": 50}
    p = run(RUNNING, ready(0), ready(1), now=9, progress=reported)
    assert p.status["progress"] == {**reported, "lossShort": "0.2500"}
    assert p.requeue_after == SETTINGS.progress_sync_seconds


def test_missing_support_objects_are_recreated_while_running() -> None:
    children = SUPPORT - {("Service", "j")}
    p = run(RUNNING, ready(0), ready(1), now=9, children=children)
    assert created(p) == ["Service/j"]


def test_admission_gate_opens() -> None:
    queued = DDP.copy().with_full_status(run(DDP, admitted=False).status)
    assert queued.obj()["status"]["phase"] == "Queued"
    p = run(queued, now=30)
    assert created(p) == GANG_0
    assert condition(p, "Admitted")["status"] == "True"
    assert p.status["startTime"] == iso(30)
    assert not any(e.reason == "Admitted" for e in p.events)  # built-in: no Event for it


def test_a_job_being_deleted_is_left_to_the_garbage_collector() -> None:
    job = RUNNING.copy()
    obj = job.obj()
    obj["metadata"]["deletionTimestamp"] = iso(50)
    p = plan(Observed(job=obj, pods=pods(ready(0), ready(1)), now=at(50)), SETTINGS)
    assert (p.create, p.delete_pods, p.events, p.delete_job) == ([], [], [], False)
    assert p.status == obj["status"]


def test_never_stuck_in_restarting() -> None:
    """From Restarting, whatever remains of the old gang, the plan either creates the next
    gang or says when to look again."""
    leftovers = [[], [w(0).terminating(20)], [w(1).failed(137).terminating(20), w(0)]]
    for observed in leftovers:
        for now in (20, 25, 30, 400):
            p = run(RESTARTING, *observed, now=now)
            assert p.create or (p.requeue_after is not None and p.requeue_after > 0), (
                observed,
                now,
            )


# --- the API server refuses a create (Observed.create_error) --------------------------------


def _refused(
    job: JobBuilder, code: int, message: str, *observed: PodBuilder, now: float = 1
) -> Plan:
    error = CreateError("Pod", "j-worker-1", code, "X", message)
    return plan(
        Observed(
            job=job.obj(), pods=pods(*observed), children=SUPPORT, now=at(now), create_error=error
        ),
        SETTINGS,
    )


def test_permanent_refusal_fails_the_job_and_deletes_the_whole_gang() -> None:
    p = _refused(DDP, 422, 'Pod "j-worker-1" is invalid: spec.containers[0].image: Required value')
    assert p.status["phase"] == "Failed"
    failed = condition(p, "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "spec.containers[0].image" in failed["message"] and "j-worker-1" in failed["message"]
    # j-worker-0 may have been created in the same pass: it is not observed, still deleted.
    assert p.delete_pods == ["j-worker-0", "j-worker-1"]
    # (A fresh job's Normal EphemeralCheckpoints event may come first.)
    assert [e.reason for e in p.events if e.type == "Warning"] == ["InvalidSpec"]


def test_transient_refusal_keeps_the_phase_and_says_why_once() -> None:
    message = 'pods "j-worker-1" is forbidden: exceeded quota: gpus'
    first = _refused(DDP, 403, message)
    assert first.status["phase"] == "Starting"
    running = condition(first, "Running")
    assert running["reason"] == "CreateFailed" and "exceeded quota" in running["message"]
    assert "CreateFailed" in [e.reason for e in first.events]
    # The next pass meets the same refusal: same condition, no second event.
    again = _refused(DDP.copy().with_full_status(first.status), 403, message, w(0), now=3)
    assert condition(again, "Running")["reason"] == "CreateFailed"
    assert "CreateFailed" not in [e.reason for e in again.events]
    # Once the create goes through, the condition says how many pods are ready again.
    ok = run(DDP.copy().with_full_status(again.status), w(0), w(1), now=5)
    assert condition(ok, "Running")["reason"] == "PodsNotReady"


# --- disruptions and lost nodes ----------------------------------------------------------------


def test_eviction_restarts_the_gang_without_consuming_backoff_limit_0() -> None:
    job = DDP.copy().with_run_policy(backoffLimit=0, backoffSeconds=1)
    running = after(after(job), ready(0), ready(1), now=1)
    p = run(running, ready(0), ready(1).disrupted().terminating(10), now=2)
    assert p.status["phase"] == "Restarting"
    assert (p.status["restarts"], p.status["countedRestarts"]) == (1, 0)
    assert condition(p, "Restarting")["reason"] == "Disrupted"
    assert "Disrupted" in [e.reason for e in p.events]
    # A second eviction is not counted either; a real failure then is the first counted one.
    again = after(
        after(job.copy().with_full_status(p.status), now=5), ready(0, 1), ready(1, 1), now=6
    )
    p = run(again, ready(0, 1).disrupted().terminating(10), ready(1, 1), now=7)
    assert (p.status["phase"], p.status["restarts"], p.status["countedRestarts"]) == (
        "Restarting",
        2,
        0,
    )
    again = after(
        after(job.copy().with_full_status(p.status), now=20), ready(0, 2), ready(1, 2), now=21
    )
    p = run(again, ready(0, 2), w(1, 2).failed(137, finished_at=22), now=22)
    assert p.status["phase"] == "Failed"
    assert condition(p, "Failed")["reason"] == "BackoffLimitExceeded"


def test_a_status_without_counted_restarts_counts_every_restart() -> None:
    job = DDP.copy().with_run_policy(backoffLimit=1, backoffSeconds=1)
    running = after(after(job), ready(0), ready(1), now=1)
    status = dict(running.obj()["status"], restarts=1)
    status.pop("countedRestarts", None)
    p = run(job.copy().with_full_status(status), ready(0, 1), w(1, 1).failed(137), now=2)
    assert condition(p, "Failed")["reason"] == "BackoffLimitExceeded"


def _with_lost(job: JobBuilder, lost: set[str], *observed: PodBuilder, now: float) -> Plan:
    return plan(
        Observed(
            job=job.obj(), pods=pods(*observed), children=SUPPORT, now=at(now), lost_nodes=lost
        ),
        SETTINGS,
    )


def test_pod_stuck_terminating_on_a_lost_node_is_force_deleted_after_grace_and_margin() -> None:
    margin = SETTINGS.force_delete_margin_seconds
    stuck = w(1).running().terminating(since=10).on_node("dead")
    # Restarting: the survivor is deleted normally; the stuck one waits for grace + margin.
    p = _with_lost(
        RESTARTING, {"dead"}, w(0).running().terminating(20).on_node("ok"), stuck, now=21
    )
    assert p.force_delete_pods == []
    assert p.requeue_after is not None and p.requeue_after <= 10 + margin - 21 + 0.001
    p = _with_lost(RESTARTING, {"dead"}, stuck, now=10 + margin)
    assert p.force_delete_pods == ["j-worker-1"]
    # The same pod on a healthy node is left to its kubelet.
    p = _with_lost(RESTARTING, set(), w(1).running().terminating(10).on_node("ok"), now=10 + margin)
    assert p.force_delete_pods == []


def test_member_lost_with_its_node_restarts_without_counting() -> None:
    p = _with_lost(
        RUNNING, {"dead"}, ready(0).on_node("ok"), ready(1).terminating(30).on_node("dead"), now=31
    )
    assert p.status["phase"] == "Restarting"
    assert condition(p, "Restarting")["reason"] == "Disrupted"
    assert p.status["countedRestarts"] == 0


def _vanished(lost: set[str], gone: PodBuilder, *observed: PodBuilder, now: float) -> Plan:
    """A member force-deleted before any pass saw it terminate: only its last state is left."""
    return plan(
        Observed(
            job=RUNNING.obj(),
            pods=pods(*observed),
            gone_pods=pods(gone),
            children=SUPPORT,
            now=at(now),
            lost_nodes=lost,
        ),
        SETTINGS,
    )


def test_member_force_deleted_off_a_lost_node_restarts_without_counting() -> None:
    gone = ready(1).terminating(30).on_node("dead")
    p = _vanished({"dead"}, gone, ready(0).on_node("ok"), now=31)
    assert (p.status["phase"], p.status["countedRestarts"]) == ("Restarting", 0)
    assert condition(p, "Restarting")["reason"] == "Disrupted"
    assert "node lost" in condition(p, "Restarting")["message"]
    # Evicted (DisruptionTarget) and gone at once: a disruption too, wherever it ran.
    p = _vanished(set(), ready(1).disrupted().on_node("ok"), ready(0).on_node("ok"), now=31)
    assert (p.status["restarts"], p.status["countedRestarts"]) == (1, 0)
    # Gone from a healthy node without a disruption (a user's delete): a counted failure.
    p = _vanished(set(), ready(1).on_node("ok"), ready(0).on_node("ok"), now=31)
    assert (p.status["restarts"], p.status["countedRestarts"]) == (1, 1)
    # The last state of an older generation is never this gang's member: counted as well.
    p = _vanished({"dead"}, w(1, 5).on_node("dead"), ready(0).on_node("ok"), now=31)
    assert (p.status["restarts"], p.status["countedRestarts"]) == (1, 1)


def test_child_conflict_waits_without_restarting_the_gang() -> None:
    from dtjob_operator.policies.ownership import ownership_conflict

    error = ownership_conflict(
        {"metadata": {"ownerReferences": []}}, "ServiceAccount", "j-trainer", "j", "uid-j"
    )
    assert error is not None
    first = plan(Observed(job=DDP.obj(), children=SUPPORT, now=at(1), create_error=error), SETTINGS)
    running = condition(first, "Running")
    assert running["reason"] == "ChildConflict" and "not owned by this job" in running["message"]
    assert first.status["reason"] == "ChildConflict"
    # Next pass: no pods exist, which is no lost member: the gang is created, not restarted.
    p = run(DDP.copy().with_full_status(first.status), now=3)
    assert p.status["phase"] == "Starting" and p.status["restarts"] == 0
    assert created(p) == GANG_0


def test_refused_after_admission_gives_the_admission_back() -> None:
    admitted = after(DDP, now=0)  # Admitted=True, Starting
    p = _refused(admitted, 422, 'Pod "j-worker-1" is invalid: spec.x: Invalid value', now=1)
    assert p.status["phase"] == "Failed"
    assert condition(p, "Admitted")["status"] == "False"
    assert condition(p, "Admitted")["reason"] == "InvalidSpec"


def test_guard_rails_hold_a_job_until_it_starts_not_after() -> None:
    # The same spec: refused while it waits to start, kept once running (an admin who
    # tightens a rail must not fail the jobs already training); a resume is a new start.
    host = DDP.copy().with_template("worker", spec={"hostNetwork": True})
    p = run(host, now=1)
    assert p.status["phase"] == "Failed" and p.create == []
    assert "setting allowHostNamespaces" in condition(p, "Failed")["message"]
    started = host.copy().with_full_status(RUNNING.obj()["status"])
    p = run(started, ready(0), ready(1), now=9)
    assert p.status["phase"] == "Running"
    suspended = after(started.copy().with_spec(suspend=True), ready(0), ready(1), now=10)
    resumed = suspended.copy().with_spec(suspend=False)
    assert run(resumed, now=11).status["phase"] == "Failed"
