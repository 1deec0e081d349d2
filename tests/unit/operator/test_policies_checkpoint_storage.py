"""Checkpoint storage policy: the CheckpointStorage verdict per claim, and what the planner
does with it (condition, one event per change, waiting for a missing claim, InvalidSpec)."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.builders import JobBuilder, a_job, at
from unit.operator.planning import SETTINGS, condition

from dtjob_operator.builders import Job
from dtjob_operator.lifecycle import Observed, Plan, plan
from dtjob_operator.policies.checkpoint_storage import access_modes, judge_checkpoint_storage

NO_CLAIM = a_job().with_workers(2, gpus=1)
CLAIMED = a_job().with_workers(2, gpus=1).with_checkpoint(claimName="ckpt")
ONE_POD = a_job().with_workers(1, gpus=1).with_checkpoint(claimName="ckpt")


def pvc(*modes: str, phase: str | None = "Bound", bound_modes: bool = True) -> dict[str, Any]:
    """A PersistentVolumeClaim as the API returns it."""
    claim: dict[str, Any] = {
        "metadata": {"name": "ckpt", "namespace": "default"},
        "spec": {"accessModes": list(modes)},
    }
    if phase is not None:
        claim["status"] = {"phase": phase}
        if phase == "Bound" and bound_modes:
            claim["status"]["accessModes"] = list(modes)
    return claim


def terminating(claim: dict[str, Any]) -> dict[str, Any]:
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return claim


RWX, RWO, RWOP = "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"

# (name, job, claim, ok, reason, blocks_start, invalid, event type, words in the message)
CASES = [
    ("no claim", NO_CLAIM, None, False, "EphemeralCheckpoints", False, False, "Normal",
     ("emptyDir", "spec.checkpoint.claimName", "ReadWriteMany")),
    ("no claim, a claim object is ignored", NO_CLAIM, pvc(RWX), False, "EphemeralCheckpoints",
     False, False, "Normal", ("emptyDir",)),
    ("claim missing", CLAIMED, None, False, "ClaimNotFound", True, False, "Warning",
     ("'ckpt'", "'default'", "spec.checkpoint.claimName")),
    ("bound RWX", CLAIMED, pvc(RWX), True, "Persistent", False, False, "Normal", ("'ckpt'",)),
    ("bound RWX among other modes", CLAIMED, pvc(RWO, RWX), True, "Persistent", False, False,
     "Normal", ()),
    ("bound RWO, two pods", CLAIMED, pvc(RWO), False, "ClaimNotShareable", False, False,
     "Warning", ("different nodes", "ReadWriteOnce claim 'ckpt'", "ReadWriteMany", "one node")),
    ("bound RWO, one pod", ONE_POD, pvc(RWO), True, "Persistent", False, False, "Normal", ()),
    ("bound RWOP, one pod", ONE_POD, pvc(RWOP), True, "Persistent", False, False, "Normal", ()),
    ("RWOP, two pods: never works", CLAIMED, pvc(RWOP), False, "ClaimNotShareable", False, True,
     "Warning", ("ReadWriteOncePod", "2 pods", "ReadWriteMany")),
    ("RWOP pending, two pods: never works", CLAIMED, pvc(RWOP, phase="Pending"), False,
     "ClaimNotShareable", False, True, "Warning", ("ReadWriteOncePod",)),
    ("pending RWX", CLAIMED, pvc(RWX, phase="Pending"), False, "ClaimPending", False, False,
     "Normal", ("not bound", "Pending", "WaitForFirstConsumer")),
    ("no status yet reads as pending", CLAIMED, pvc(RWX, phase=None), False, "ClaimPending",
     False, False, "Normal", ("Pending",)),
    ("lost", CLAIMED, pvc(RWX, phase="Lost"), False, "ClaimLost", False, False, "Warning",
     ("Lost",)),
    ("being deleted", CLAIMED, terminating(pvc(RWX)), False, "ClaimTerminating", True, False,
     "Warning", ("being deleted", "'ckpt'")),
    ("bound, modes only in spec", CLAIMED, pvc(RWX, bound_modes=False), True, "Persistent",
     False, False, "Normal", ()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("job", "claim", "ok", "reason", "blocks", "invalid", "event_type", "words"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_verdict(
    job: JobBuilder,
    claim: dict[str, Any] | None,
    ok: bool,
    reason: str,
    blocks: bool,
    invalid: bool,
    event_type: str,
    words: tuple[str, ...],
) -> None:
    spec = Job.from_object(job.obj()).spec
    size = sum(r["replicas"] for r in job.spec["roles"].values())
    verdict = judge_checkpoint_storage(spec, size, "default", claim)
    assert (verdict.ok, verdict.reason) == (ok, reason)
    assert (verdict.blocks_start, verdict.invalid) == (blocks, invalid)
    assert verdict.event_type == event_type
    for word in words:
        assert word in verdict.message


def test_bound_volume_modes_win_over_requested_ones() -> None:
    claim = pvc(RWO)
    claim["status"]["accessModes"] = [RWX]
    assert access_modes(claim) == {RWX}


# --- the planner ------------------------------------------------------------------------------


def step(job: JobBuilder, claim: dict[str, Any] | None, now: float = 0) -> Plan:
    return plan(Observed(job=job.obj(), now=at(now), checkpoint_claim=claim), SETTINGS)


def then(job: JobBuilder, p: Plan) -> JobBuilder:
    return job.copy().with_full_status(p.status)


def pods_created(p: Plan) -> list[str]:
    return [m["metadata"]["name"] for m in p.create if m["kind"] == "Pod"]


def test_missing_claim_holds_the_gang_and_says_why() -> None:
    p = step(CLAIMED, None)
    assert pods_created(p) == [] and p.status["phase"] == "Pending"
    c = condition(p, "CheckpointStorage")
    assert (c["status"], c["reason"]) == ("False", "ClaimNotFound")
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "ClaimNotFound")]
    assert p.requeue_after == SETTINGS.resync_seconds  # the claim is looked for again


def test_gang_starts_once_the_claim_exists() -> None:
    waiting = then(CLAIMED, step(CLAIMED, None))
    again = step(waiting, None, now=10)
    assert again.events == [] and pods_created(again) == []  # no event while nothing changes
    p = step(then(waiting, again), pvc(RWX), now=20)
    assert pods_created(p) == ["j-worker-0", "j-worker-1"] and p.status["phase"] == "Starting"
    c = condition(p, "CheckpointStorage")
    assert (c["status"], c["reason"]) == ("True", "Persistent")
    assert [e.reason for e in p.events] == ["Persistent", "Created"]


def test_ephemeral_checkpoints_are_said_once_and_the_job_runs() -> None:
    p = step(NO_CLAIM, None)
    assert pods_created(p) == ["j-worker-0", "j-worker-1"]
    assert condition(p, "CheckpointStorage")["reason"] == "EphemeralCheckpoints"
    assert (p.events[0].type, p.events[0].reason) == ("Normal", "EphemeralCheckpoints")
    again = step(then(NO_CLAIM, p), None, now=5)
    assert "EphemeralCheckpoints" not in [e.reason for e in again.events]
    assert condition(again, "CheckpointStorage") == condition(p, "CheckpointStorage")


def test_read_write_once_claim_warns_but_does_not_block() -> None:
    p = step(CLAIMED, pvc(RWO))
    assert pods_created(p) == ["j-worker-0", "j-worker-1"]
    assert condition(p, "CheckpointStorage")["reason"] == "ClaimNotShareable"
    assert ("Warning", "ClaimNotShareable") in [(e.type, e.reason) for e in p.events]


def test_read_write_once_pod_claim_for_a_gang_is_invalid() -> None:
    p = step(CLAIMED, pvc(RWOP))
    assert p.status["phase"] == "Failed" and p.create == []
    failed = condition(p, "Failed")
    assert failed["reason"] == "InvalidSpec" and "ReadWriteOncePod" in failed["message"]
    assert [e.reason for e in p.events] == ["InvalidSpec"]


def test_pending_claim_does_not_block_the_gang() -> None:
    # A WaitForFirstConsumer claim binds only once a pod that mounts it is scheduled.
    p = step(CLAIMED, pvc(RWX, phase="Pending"))
    assert pods_created(p) == ["j-worker-0", "j-worker-1"]
    assert condition(p, "CheckpointStorage")["reason"] == "ClaimPending"


def test_restart_waits_for_a_claim_that_went_away_in_phase_restarting() -> None:
    restarting = CLAIMED.copy().with_status(phase="Restarting", restarts=1)
    p = step(restarting, None)
    assert pods_created(p) == [] and p.status["phase"] == "Restarting"
