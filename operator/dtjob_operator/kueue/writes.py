"""The Workload writes of the Kueue backend (backend.py), each as Kueue's own job integrations
make it (jobframework): the admission handed back once an evicted gang is gone, PodsReady,
Finished, the finalizer let go, spec.active for the job's spec.suspend, and deletion.

Status writes are server-side applies under the field manager Kueue uses for the same
fields, so there is one owner per field; the admission's release carries the
resourceVersion it was computed from, since Kueue's own writes are strict about it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dtjob_api.status import JobPhase
from dtjob_operator.constants import ANNOTATION_SUSPENDED_BY_JOB
from dtjob_operator.kueue.api import KueueApi
from dtjob_operator.kueue.verdict import condition, verdict
from dtjob_operator.kueue.workload import FINALIZER, JOB_UID_LABEL

log = logging.getLogger(__name__)
Obj = dict[str, Any]
# Field manager of the Finished condition: Kueue reads the condition whoever wrote it, and a
# manager of our own leaves the conditions Kueue applies under its managers alone.
FINISHED_MANAGER = "dtjob-operator-finished"
# Clearing an admission must remove `status.admission`, which Kueue applies under this
# manager: only an apply under the same manager that leaves it out removes it. The apply
# then carries every other field that manager owns as it is (Kueue's PrepareWorkloadPatch).
ADMISSION_MANAGER = "kueue-admission"
# Kueue's job integrations apply PodsReady under this manager; the same keeps one owner.
PODS_READY_MANAGER = "kueue-job-controller-PodsReady"
_ADMISSION_CONDITIONS = ("QuotaReserved", "Evicted", "Admitted", "Preempted", "Requeued",
                         "DeactivationTarget", "Finished")  # fmt: skip
_ADMISSION_FIELDS = ("requeueState", "resourceRequests", "accumulatedPastExecutionTimeSeconds",
                     "schedulingStats", "clusterName", "nominatedClusterNames",
                     "unhealthyNodes", "admissionChecks")  # fmt: skip
# Evictions after which Kueue's integrations mark the Workload Requeued=True at once.
_REQUEUED_AT_ONCE = ("Preempted", "NodeFailures")


class WorkloadWrites:
    """Writes to a job's Workload."""

    def __init__(self, api: KueueApi) -> None:
        self.api = api

    def release(self, workload: Obj, reason: str, message: str) -> None:
        """The evicted gang is gone: clear the admission so that Kueue queues the Workload
        again (what Kueue's job integrations do once the job is stopped)."""
        status = workload.get("status") or {}
        now = workload["metadata"].get("creationTimestamp")
        kept = {c["type"]: c for c in status.get("conditions") or []
                if c.get("type") in _ADMISSION_CONDITIONS}  # fmt: skip
        for type_, state, why in (
            ("QuotaReserved", "False", "Pending"),
            ("Admitted", "False", "NoReservation"),
            ("Requeued", "True" if reason in _REQUEUED_AT_ONCE else "False", reason),
        ):
            old = kept.get(type_) or {}
            changed = old.get("status") != state
            kept[type_] = {
                "type": type_, "status": state, "reason": why or "Evicted", "message": message,
                "lastTransitionTime": _now() if changed else old.get("lastTransitionTime", now),
            }  # fmt: skip
        body: Obj = {
            "apiVersion": workload["apiVersion"],
            "kind": "Workload",
            # At the version read: Kueue's own writes of the admission are strict about it.
            "metadata": {"name": workload["metadata"]["name"],
                         "namespace": workload["metadata"]["namespace"],
                         "resourceVersion": workload["metadata"]["resourceVersion"]},
            "status": {"conditions": list(kept.values()),
                       **{k: status[k] for k in _ADMISSION_FIELDS if k in status}},
        }  # fmt: skip
        self.api.apply_workload_status(body, ADMISSION_MANAGER)
        meta = workload["metadata"]
        log.info("released the admission of Workload %s/%s after its eviction (%s)",
                 meta["namespace"], meta["name"], reason)  # fmt: skip

    def pods_ready(self, workload: Obj, phase: str) -> None:
        """PodsReady as Kueue's job integrations report it: with waitForPodsReady on, a
        Workload that never says so is evicted after its timeout."""
        prior = condition(workload, "PodsReady") or {}
        if not verdict(workload).admitted:
            state, reason = "False", "WaitForStart"
        elif phase == JobPhase.RUNNING:
            was = prior.get("reason")
            state, reason = (
                "True",
                "Recovered" if was in ("WaitForRecovery", "Recovered") else "Started",
            )
        elif prior.get("status") == "True":
            state, reason = "False", "WaitForRecovery"
        else:
            state, reason = "False", "WaitForStart"
        if (prior.get("status"), prior.get("reason")) == (state, reason):
            return
        message = {
            "Started": "all pods of the gang are ready",
            "Recovered": "all pods of the restarted gang are ready",
            "WaitForStart": "not all pods of the gang are ready yet",
            "WaitForRecovery": "the gang restarts: not all pods are ready",
        }[reason]
        body = {
            "apiVersion": workload["apiVersion"],
            "kind": "Workload",
            "metadata": {"name": workload["metadata"]["name"],
                         "namespace": workload["metadata"]["namespace"]},
            "status": {"conditions": [{"type": "PodsReady", "status": state, "reason": reason,
                                       "message": message, "lastTransitionTime": _now()}]},
        }  # fmt: skip
        self.api.apply_workload_status(body, PODS_READY_MANAGER)

    def let_go(self, workloads: Sequence[Obj], live_uid: str | None) -> None:
        """The job went (or is going): its Workloads' finalizer is removed, as Kueue's job
        integrations remove it, so that the garbage collector deletes them and Kueue frees
        their quota. Without this, a job deleted while admitted would hold its quota, and
        its namespace would never finish terminating. A Workload of the job's live
        incarnation (`live_uid`) is kept."""
        for workload in workloads:
            meta = workload.get("metadata") or {}
            if (meta.get("labels") or {}).get(JOB_UID_LABEL) == live_uid and live_uid:
                continue
            finalizers = list(meta.get("finalizers") or [])
            if FINALIZER not in finalizers:
                continue
            self.api.set_workload_finalizers(workload, [f for f in finalizers if f != FINALIZER])
            log.info("let go of Workload %s/%s", meta.get("namespace"),
                     meta.get("name"))  # fmt: skip

    def finish(self, workload: Obj, reason: str, message: str, when: str | None) -> None:
        """Mark the Workload Finished (reason Succeeded, Failed or FailedToStart, as Kueue's
        integrations say it), so that Kueue gives its quota back at once."""
        if (condition(workload, "Finished") or {}).get("status") == "True":
            return
        meta = workload["metadata"]
        body = {
            "apiVersion": workload["apiVersion"],
            "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": {"conditions": [{
                "type": "Finished", "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": when or _now(),
            }]},
        }  # fmt: skip
        self.api.apply_workload_status(body, FINISHED_MANAGER)
        log.info("Workload %s/%s Finished (%s): %s", meta["namespace"], meta["name"], reason,
                 message)  # fmt: skip

    def set_active(self, workload: Obj, active: bool) -> None:
        """spec.active for the job's own spec.suspend: false (once the gang's pods are gone:
        Kueue drops an inactive Workload's quota at once) marks the Workload as deactivated
        for the job, so that resuming the job, and only that, activates it again."""
        meta = workload["metadata"]
        mark = None if active else "true"
        patch = {"metadata": {"annotations": {ANNOTATION_SUSPENDED_BY_JOB: mark},
                              "resourceVersion": meta["resourceVersion"]},
                 "spec": {"active": active}}  # fmt: skip
        self.api.patch_workload(meta["namespace"], meta["name"], patch)
        log.info("Workload %s/%s %s", meta["namespace"], meta["name"],
                 "activated: the job was resumed" if active
                 else "deactivated: the job was suspended and its pods are gone")  # fmt: skip

    def delete(self, workload: Obj) -> None:
        """Let go of the Workload and delete it: its quota goes back at once, and a job
        that comes back to Kueue later gets a fresh one."""
        self.let_go([workload], None)
        meta = workload["metadata"]
        self.api.delete_workload(meta["namespace"], meta["name"])
        log.info("deleted Workload %s/%s", meta["namespace"], meta["name"])


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
