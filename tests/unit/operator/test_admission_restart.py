"""A restarted gang is admitted again against the capacity of now (decide, snapshot, book,
planner): kept when it still fits, released to the queue when it no longer does."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from unit.operator.builders import T0, a_job, a_pod, at, pods
from unit.operator.test_admission import node, snapshot, view

from dtjob_operator.admission.book import AdmissionBook
from dtjob_operator.admission.decide import Decisions, decide
from dtjob_operator.admission.seam import AdmissionVerdict
from dtjob_operator.admission.snapshot import build_snapshot, gang_pods, is_admitted
from dtjob_operator.constants import REASON_INADMISSIBLE, REASON_WAITING_FOR_ADMISSION
from dtjob_operator.lifecycle import Observed, plan
from dtjob_operator.settings import OperatorSettings

SETTINGS = OperatorSettings()


def restarted(name: str, pods_: int = 2, gpus: int = 4, **fields: Any) -> Any:
    """An admitted gang of generation 1 whose pods are not created yet."""
    return view(name, pods_, gpus, admitted=True, started=False, restarted=1, **fields)


# -- decide ---------------------------------------------------------------------------------


def test_a_restarted_gang_that_still_fits_keeps_its_admission_and_its_room() -> None:
    jobs = [restarted("r", created=0), view("next", 2, 4, created=1)]
    result = decide(snapshot(jobs, nodes=[node("n0", 8)]), preemption=False)
    assert result.release == {}
    # The pass says which generation it checked: the reconcile creates it only then.
    assert result.refit == {"r": 1} and result.keys["r"] == ("a", "r")
    # Its nodes are taken: the job behind it does not get them.
    assert result.verdicts["next"].admit is False


def test_a_restarted_gang_whose_node_is_gone_is_released_saying_it_can_never_fit() -> None:
    # Two pods of 4 GPUs; the only Ready node left has 4.
    result = decide(snapshot([restarted("r")], nodes=[node("n0", 4)]), preemption=False)
    verdict = result.release["r"]
    assert result.refit == {}
    assert verdict.admit is False and verdict.reason == REASON_INADMISSIBLE
    assert verdict.message.startswith("the restarted gang no longer fits (can never be admitted")
    assert result.release_generation["r"] == 1 and result.keys["r"] == ("a", "r")


def test_a_restarted_gang_whose_room_was_taken_waits_with_the_numbers() -> None:
    result = decide(snapshot([restarted("r")], nodes=[node("n0", 8, free=4)]), preemption=False)
    verdict = result.release["r"]
    assert verdict.reason == REASON_WAITING_FOR_ADMISSION
    assert "free nvidia.com/gpu per Ready node: 4" in verdict.message


def test_a_restarted_gang_over_a_lowered_quota_is_released_with_the_quota_numbers() -> None:
    result = decide(snapshot([restarted("r")], quotas={"a": (8, 4)}), preemption=False)
    assert "needs 8 nvidia.com/gpu, namespace a has 4 free of 8" in result.release["r"].message
    never = decide(snapshot([restarted("r")], quotas={"a": (4, 4)}), preemption=False)
    assert never.release["r"].reason == REASON_INADMISSIBLE


def test_a_restarted_gang_is_placed_before_reservations_of_gangs_being_created() -> None:
    # "other" was admitted but its pods are not created yet: a reservation, not a pod. The
    # restarted gang takes what is free first, so a reservation cannot push it out.
    jobs = [view("other", 1, 8, admitted=True, started=False), restarted("r", created=1)]
    result = decide(snapshot(jobs, nodes=[node("n0", 8), node("n1", 4)]), preemption=False)
    assert result.release == {}


def test_a_restarted_gang_goes_back_where_it_was_and_never_onto_a_kept_reservation() -> None:
    """ "urgent" was admitted onto n0 in an earlier pass and its pod may be being created
    there; "flex" restarted (a resize) with its rank 0 kept on n1. Placed afresh first, flex
    took n0 (both empty, by name): urgent was moved while its pod was being pinned to n0."""
    urgent = view("urgent", 1, 8, admitted=True, started=False, missing_names=("urgent-w-0",))
    flex = restarted("flex", 1, 8, pod_names=("flex-w-0",))
    snap = snapshot([urgent, flex], nodes=[node("n0", 8), node("n1", 8)])
    snap = replace(snap, kept={"urgent": {"urgent-w-0": "n0"}, "flex": {"flex-w-0": "n1"}})
    result = decide(snap, preemption=False)
    assert result.placements == {"urgent": {"urgent-w-0": "n0"}, "flex": {"flex-w-0": "n1"}}
    assert result.refit == {"flex": 1} and result.release == {}
    # A reservation placed afresh is said with its key: the reconcile is told to pin it.
    moved = replace(snap, kept={"urgent": {"urgent-w-0": "gone"}})
    result = decide(moved, preemption=False)
    assert result.placements["urgent"] == {"urgent-w-0": "n1"}
    assert result.keys["urgent"] == ("a", "urgent")


# -- snapshot -------------------------------------------------------------------------------


def _snap(job: Any, *live: Any) -> Any:
    (v,) = build_snapshot(
        jobs=[job.obj()], pods=pods(*live), nodes=[], quotas=[], priority_classes=[],
        gang_of=lambda j: gang_pods(j, SETTINGS), admitted=is_admitted,
        not_before=lambda j: None, now=T0,
    ).jobs  # fmt: skip
    return v


def _restarting(restarts: int = 1) -> Any:
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "m"}
    return (
        a_job("j", "a")
        .with_workers(2, gpus=4)
        .with_status(phase="Restarting", restarts=restarts, conditions=[admitted])
    )


def test_snapshot_marks_a_restarted_gang_once_no_old_pod_is_left() -> None:
    job = _restarting()
    assert _snap(job).restarted == 1
    old = a_pod(job, "worker", 0, generation=0).running().terminating()
    assert _snap(job, old).restarted is None  # it still holds its node
    assert _snap(_restarting(restarts=0)).restarted is None  # a first gang: just admitted
    first_created = a_pod(job, "worker", 0, generation=1).running()
    assert _snap(job, first_created).restarted is None


# -- book -----------------------------------------------------------------------------------


def _job(phase: str = "Restarting", restarts: int = 1) -> dict[str, Any]:
    return _restarting(restarts).with_status(phase=phase).obj()


def test_book_release_applies_to_its_gang_generation_before_the_pods_exist() -> None:
    released = decide(snapshot([restarted("r")], nodes=[node("n0", 4)]), preemption=False)
    book = AdmissionBook()
    job = _job()
    job["metadata"]["uid"] = "r"
    assert book.record(released, book.epoch()) == ["r"]
    v = book.view(job)
    assert v.admitted is False and v.reason == REASON_INADMISSIBLE
    assert "no longer fits" in v.message
    starting = {**job, "status": {**job["status"], "phase": "Starting"}}
    assert book.view(starting).admitted is True  # created meanwhile: the release is moot
    later = {**job, "status": {**job["status"], "restarts": 2}}
    assert book.view(later).admitted is True
    # Each pass replaces the releases: fitting again undoes it.
    book.record(Decisions(), book.epoch())
    assert book.view(job).admitted is True


def test_book_holds_a_restarted_gang_until_a_pass_has_checked_its_generation() -> None:
    # The reconcile woken by the last old pod's deletion ran before any pass: it created the
    # new gang on a cordoned node, where it hung Pending (seen in CI).
    book = AdmissionBook()
    job = _job()
    job["metadata"]["uid"] = "r"
    v = book.view(job)
    assert v.admitted is True and v.refit_pending is True
    # A pass that checked generation 1 (its old pods gone) and found it fits lets it start.
    fits = decide(snapshot([restarted("r")], nodes=[node("n0", 8)]), preemption=False)
    assert book.record(fits, book.epoch()) == ["r"]
    assert book.view(job).refit_pending is False
    assert book.record(fits, book.epoch()) == []  # the same news wakes nobody twice
    # Generation 2 (it failed again) waits for its own check; other phases never wait.
    again = {**job, "status": {**job["status"], "restarts": 2}}
    assert book.view(again).refit_pending is True
    for phase in ("Starting", "Running", "Pending"):
        other = {**again, "status": {**again["status"], "phase": phase}}
        seen = book.view(other)
        assert seen.admitted and not seen.refit_pending and seen.preempted is None
    # A first gang (restarts 0) was checked by the pass that admitted it.
    assert book.view(_job(restarts=0)).refit_pending is False
    book.forget("r")
    assert book.view(job).refit_pending is True


# -- planner --------------------------------------------------------------------------------


def test_planner_creates_a_restarted_gang_only_once_a_pass_has_checked_it() -> None:
    job = _restarting()
    held = plan(
        Observed(job=job.obj(), pods=[], now=at(0), admission=AdmissionVerdict(refit_pending=True)),
        SETTINGS,
    )
    assert [m for m in held.create if m["kind"] == "Pod"] == []
    assert held.status["phase"] == "Restarting"
    assert held.requeue_after is not None and held.requeue_after > 0
    checked = plan(Observed(job=job.obj(), pods=[], now=at(0)), SETTINGS)
    assert {m["metadata"]["name"] for m in checked.create if m["kind"] == "Pod"} == {
        "j-worker-0", "j-worker-1"
    }  # fmt: skip
    # A gang created before the check's news (the status write was lost) is completed, not
    # held for a pass that would never call it restarted.
    created = a_pod(job, "worker", 0, generation=1).running()
    unchecked = AdmissionVerdict(refit_pending=True)
    partial = plan(Observed(job=job.obj(), pods=pods(created), now=at(0), admission=unchecked),
                   SETTINGS)  # fmt: skip
    assert [m["metadata"]["name"] for m in partial.create if m["kind"] == "Pod"] == ["j-worker-1"]


def test_planner_puts_a_released_restarted_gang_back_in_the_queue_with_a_warning() -> None:
    job = _restarting()
    message = "the restarted gang no longer fits (needs ...); it waits in the queue again"
    p = plan(
        Observed(
            job=job.obj(), pods=[], now=at(0), admission=AdmissionVerdict(
                admitted=False, message=message, reason=REASON_WAITING_FOR_ADMISSION),
        ),
        SETTINGS,
    )  # fmt: skip
    assert p.status["phase"] == "Queued" and p.create == []
    admitted = next(c for c in p.status["conditions"] if c["type"] == "Admitted")
    assert admitted["status"] == "False" and admitted["message"] == message
    (event,) = [e for e in p.events if e.reason == REASON_WAITING_FOR_ADMISSION]
    assert event.type == "Warning" and event.message == message
