"""The Kueue admission backend's reads and writes (docs/design/kueue-contract.md, section 8):
for a job labelled kueue.x-k8s.io/queue-name, what the planner's admission inputs are, from
the job's Workload; and the Workload's own lifecycle (created while the job waits, Finished
when the job ends).

The planner does not learn which backend answered: it gets `admitted`, a message and reason
while it waits, `preempted` when Kueue evicts a running gang, and the pods' placements.
Built: create (priority from the pods' PriorityClass), wait with Kueue's message, admit
with the flavors' placement, PodsReady, stop an evicted gang and, once its pods are gone,
hand the quota back (the admission cleared, as Kueue's job integrations do), spec.suspend
as the Workload's spec.active, Finished, priority from a WorkloadPriorityClass, topology
(gated pods that Kueue's ungater places in rank order), partial admission of an elastic job
(the gang built at the count Kueue admitted). Not yet (docs/kueue.md): workload slices (a
Kueue-admitted elastic job does not grow), a Workload cache (it is read per reconcile).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dtjob_api.status import TERMINAL_PHASES, AdmissionBackendName, JobPhase
from dtjob_operator.admission.placement import PlacementConflict
from dtjob_operator.admission.seam import (
    AdmissionBackend,
    AdmissionVerdict,
    JobKey,
    observe_admission_wait,
)
from dtjob_operator.builders import Job
from dtjob_operator.builders.job import FULL_SIZE
from dtjob_operator.constants import (
    LABEL_POD_SET_INDEX,
    REASON_NO_LOCAL_QUEUE,
    REASON_WAITING_FOR_KUEUE,
)
from dtjob_operator.kueue.api import KueueApi
from dtjob_operator.kueue.verdict import (
    admitted_counts,
    admitted_message,
    condition,
    flavors_of,
    indexed,
    placements,
    verdict,
)
from dtjob_operator.kueue.workload import (
    FINALIZER,
    JOB_UID_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    Priority,
    build_workload,
    pod_sets,
    queue_of,
    workload_name,
)
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.status import admitted_in

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


class KueueBackend(AdmissionBackend):
    """What Kueue says about a job, and the Workload kept in step with the job."""

    name = AdmissionBackendName.KUEUE

    def __init__(
        self,
        api: KueueApi,
        settings: OperatorSettings,
        priority_classes: Callable[[], Sequence[Mapping[str, Any]]],
        workloads_of: Callable[[str, str], Sequence[Obj]] = lambda _ns, _name: [],
        watch_workloads: Callable[[], None] = lambda: None,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self.api = api
        self.settings = settings
        self.priority_classes = priority_classes
        self.workloads_of = workloads_of
        self.watch_workloads = watch_workloads
        self.metrics = metrics
        # The Workload each job's view() read, for after() in the same pass (a job is in one
        # worker at a time; no second read).
        self._read: dict[str, Obj | None] = {}

    def view(self, job_obj: Obj, pods: Sequence[Obj]) -> AdmissionVerdict:
        """Kueue's word on a job it holds, from the job's Workload."""
        self.watch_workloads()  # Kueue may have been installed since the start
        job = Job.from_object(job_obj)
        queue = queue_of(job_obj) or self.settings.kueue_default_queue
        if not queue:
            return AdmissionVerdict(
                by=self.name,
                admitted=False,
                reason=REASON_NO_LOCAL_QUEUE,
                message=(
                    f"this cluster admits jobs through Kueue (setting admission: kueue) and "
                    f"the job names no LocalQueue: label it {QUEUE_LABEL}=<a LocalQueue of "
                    f"namespace {job.namespace}> (kubectl label dtj {job.name} "
                    f"{QUEUE_LABEL}=<queue>), or ask the admin for a default (kueueDefaultQueue)"
                ),
            )
        name = workload_name(job)
        workload = self.api.get_workload(job.namespace, name)
        self._read[job.uid] = workload
        if workload is None:
            priority = self._priority(job_obj, job)
            if isinstance(priority, str):
                return self._waiting(priority)
            # At its maximum: an elastic job's status may hold the size of an earlier
            # admission, and Kueue's partial admission picks the size from minCount up.
            full = Job.from_object(job_obj, size=FULL_SIZE)
            body = build_workload(full, queue, self.settings, priority)
            created = self.api.create_workload(body)
            if created:
                log.info("created Workload %s/%s in LocalQueue %s", job.namespace, name, queue)
            return self._waiting(f"Workload {name} submitted to LocalQueue {queue}")
        active = (workload.get("spec") or {}).get("active", True) is not False
        if active == job.spec.suspend:
            # spec.suspend deactivates the Workload: Kueue evicts it and the quota goes back
            # once the pods are gone; resuming activates it, and it queues again.
            self.api.patch_workload(job.namespace, name, {"spec": {"active": not active}})
            log.info("Workload %s/%s %s", job.namespace, name,
                     "deactivated" if active else "activated")  # fmt: skip
        said = verdict(workload)
        if said.evicted is not None:
            reason, message = said.evicted
            if pods:  # the planner stops the gang (SIGTERM: a checkpoint is written)
                stop = f"Kueue evicted it ({reason}): {message}"
                return AdmissionVerdict(by=self.name, admitted=False, stop=stop)
            if (condition(workload, "QuotaReserved") or {}).get("status") == "True":
                self._release(workload, reason, message)
            return self._waiting(f"Kueue evicted it ({reason}): {message}; queued again")
        if not said.admitted:
            where = f"LocalQueue {queue}" + (
                f", ClusterQueue {said.cluster_queue}" if said.cluster_queue else ""
            )
            return self._waiting(f"Kueue ({where}): {said.waiting}")
        admitted = AdmissionVerdict(
            by=self.name, admitted_message=admitted_message(workload), announce_changes=True
        )
        size = self._elastic_size(job, workload)
        if size is not None:  # the gang is built at the workers Kueue admitted
            job = Job.from_object(job_obj, size=size)
            admitted = replace(admitted, elastic_size=size)
        sets = pod_sets(job, self.settings)
        present = {str(p.get("metadata", {}).get("name")) for p in pods}
        if all(pod in present for s in sets for pod in s.pods):
            return admitted  # nothing to place: no flavor to read
        flavors = {f: (self.api.get_resource_flavor(f) or {}).get("spec") or {}
                   for f in flavors_of(workload)}  # fmt: skip
        try:
            by_set = placements(workload, flavors)
        except PlacementConflict as exc:
            return self._waiting(f"Kueue's admission cannot be applied: {exc}")
        by_pod = {
            pod: indexed(by_set[pod_set.name], LABEL_POD_SET_INDEX, index)
            for pod_set in sets if pod_set.name in by_set
            for index, pod in enumerate(pod_set.pods)
        }  # fmt: skip
        return replace(admitted, placements=by_pod)

    @staticmethod
    def _elastic_size(job: Job, workload: Obj) -> int | None:
        """An elastic job's workers as Kueue admitted them: its maximum, or fewer (no fewer
        than minReplicas) where Kueue admitted it partially."""
        worker = (job.declared or job.spec).roles.worker
        if worker is None or worker.minReplicas is None:
            return None
        return admitted_counts(workload).get("worker")

    def _priority(self, job_obj: Obj, job: Job) -> Priority | str | None:
        """The Workload's priority as Kueue's integrations derive it (jobframework
        ExtractPriority; its webhook is not there to fill it in): the WorkloadPriorityClass
        the job's label names, else the pods' PriorityClass, else the cluster's global
        default PriorityClass. A class that does not exist is the message the job waits with.
        """
        labels = job_obj.get("metadata", {}).get("labels") or {}
        if wpc := labels.get(PRIORITY_LABEL):
            found = self.api.get_workload_priority_class(str(wpc))
            if found is None:
                return (
                    f"the job's label {PRIORITY_LABEL} names WorkloadPriorityClass {wpc}, "
                    f"which does not exist: create it or change the label"
                )
            return Priority("WorkloadPriorityClass", str(wpc), int(found.get("value") or 0))
        name = job.spec.priorityClassName
        classes = self.priority_classes()
        for pc in classes:
            meta = pc.get("metadata", {})
            if (meta.get("name") == name) if name else pc.get("globalDefault"):
                return Priority("PriorityClass", str(meta.get("name")), int(pc.get("value") or 0))
        if name:
            return f"spec.priorityClassName names PriorityClass {name}, which does not exist"
        return None

    def _release(self, workload: Obj, reason: str, message: str) -> None:
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
            "metadata": {"name": workload["metadata"]["name"],
                         "namespace": workload["metadata"]["namespace"]},
            "status": {"conditions": list(kept.values()),
                       **{k: status[k] for k in _ADMISSION_FIELDS if k in status}},
        }  # fmt: skip
        self.api.apply_workload_status(body, ADMISSION_MANAGER)
        meta = workload["metadata"]
        log.info("released the admission of Workload %s/%s after its eviction (%s)",
                 meta["namespace"], meta["name"], reason)  # fmt: skip

    def _waiting(self, message: str) -> AdmissionVerdict:
        return AdmissionVerdict(
            by=self.name, admitted=False, message=message, reason=REASON_WAITING_FOR_KUEUE
        )

    def after(
        self, job_obj: Obj, old: dict[str, Any], new: dict[str, Any], deleted_pods: bool
    ) -> None:
        """After the pass: the Workload's PodsReady and Finished follow the job's phase."""
        if self.metrics is not None and admitted_in(new) and not admitted_in(old):
            observe_admission_wait(self.metrics, job_obj, old)
        uid = job_obj["metadata"]["uid"]
        phase = str(new.get("phase"))
        if phase in TERMINAL_PHASES:
            self._read.pop(uid, None)
            self.finished(job_obj, phase)
            return
        workload = self._read.pop(uid, None)
        if workload is not None:
            self._pods_ready(workload, phase)

    def _pods_ready(self, workload: Obj, phase: str) -> None:
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

    def forget(self, key: JobKey, job: Obj | None) -> None:
        """A Workload left behind would hold its Kueue quota."""
        self.let_go(self.workloads_of(*key), None)

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
            log.info("let go of Workload %s/%s: its job is gone", meta.get("namespace"),
                     meta.get("name"))  # fmt: skip

    def finished(self, job_obj: Obj, phase: str) -> None:
        """The job ended: mark its Workload Finished, so that Kueue gives its quota back."""
        job = Job.from_object(job_obj)
        name = workload_name(job)
        workload = self.api.get_workload(job.namespace, name)
        if workload is None or (condition(workload, "Finished") or {}).get("status") == "True":
            return
        succeeded = phase == JobPhase.SUCCEEDED
        body = {
            "apiVersion": workload["apiVersion"],
            "kind": "Workload",
            "metadata": {"name": name, "namespace": job.namespace},
            "status": {"conditions": [{
                "type": "Finished", "status": "True",
                "reason": "Succeeded" if succeeded else "Failed",
                "message": f"the DistributedTrainingJob {phase.lower()}",
                "lastTransitionTime": job_obj.get("status", {}).get("completionTime")
                or workload["metadata"]["creationTimestamp"],
            }]},
        }  # fmt: skip
        self.api.apply_workload_status(body, FINISHED_MANAGER)
        log.info("Workload %s/%s Finished (%s)", job.namespace, name, phase)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
