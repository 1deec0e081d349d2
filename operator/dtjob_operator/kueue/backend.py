"""The Kueue admission backend (admission/seam.py; docs/design/kueue-contract.md, section 8):
for a job Kueue holds, the verdict from its Workload, and the Workload kept in step with the
job, the way Kueue's own job integrations keep theirs (jobframework/reconciler.go).

Read top to bottom, `view` is that reconciler's order:
1. A job that left Kueue (its queue label removed, admission mode builtin) is handed over:
   its gang stops, then its Workload is deleted (the quota goes back at once) and the
   built-in admission takes it.
2. No Workload: create it; but while pods of the job still run (the Workload was deleted
   under them, or the job just came to Kueue) the gang stops first: pods never run beside
   an admission they do not hold. A Workload there follows the job's priority-class
   label (priority.py).
3. spec.suspend: the gang stops; the Workload is deactivated once its pods are gone (Kueue
   gives an inactive Workload's quota back at once), and activated again on resume. The
   operator writes spec.active only for the job's spec.suspend.
4. Deactivated by Kueue or an admin (kueuectl stop workload, waitForPodsReady's requeue
   limit, a rejected AdmissionCheck): the gang stops and the job stays Suspended, saying
   who and why, until the Workload is active again.
5. Evicted: the gang stops (one preemption); once its pods are gone the admission is
   handed back and the Workload queues again.
6. Not admitted: the job waits with Kueue's message (a gang that still holds pods stops).
7. Admitted: the gang's size and placement; an admission that cannot be applied finishes
   the Workload (FailedToStart) and fails the job.
Not yet (docs/kueue.md): workload slices (a Kueue-admitted elastic job does not grow), a
Workload cache (it is read per reconcile).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from dtjob_api import GROUP, KIND, VERSION
from dtjob_api.status import TERMINAL_PHASES, AdmissionBackendName, JobPhase
from dtjob_operator.admission.placement import PlacementConflict, place
from dtjob_operator.admission.seam import (
    AdmissionBackend,
    AdmissionVerdict,
    JobKey,
    observe_admission_wait,
)
from dtjob_operator.builders import Job
from dtjob_operator.builders.children import build_pods
from dtjob_operator.builders.job import FULL_SIZE
from dtjob_operator.constants import (
    ANNOTATION_SUSPENDED_BY_JOB,
    LABEL_POD_SET_INDEX,
    REASON_ADMISSION_CONFLICT,
    REASON_ADMISSION_WITHDRAWN,
    REASON_DEACTIVATED,
    REASON_MANAGED_BY_REQUIRED,
    REASON_NO_LOCAL_QUEUE,
    REASON_PREBUILT_WORKLOAD,
    REASON_WAITING_FOR_ADMISSION,
    REASON_WAITING_FOR_KUEUE,
)
from dtjob_operator.kueue.api import KueueApi, KueueNotServed
from dtjob_operator.kueue.multikueue import (
    PREBUILT_WORKLOAD_ANNOTATION,
    MultiKueueLookup,
    cluster_name,
    dispatched,
    prebuilt_workload,
)
from dtjob_operator.kueue.priority import PriorityFollower
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
    JOB_UID_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    Priority,
    build_workload,
    pod_sets,
    queue_of,
    workload_name,
)
from dtjob_operator.kueue.writes import WorkloadWrites
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.status import admitted_in

log = logging.getLogger(__name__)
Obj = dict[str, Any]
_FINISHED_POD_PHASES = ("Succeeded", "Failed")


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
        emit_event: Callable[[Obj, str, str, str], None] = lambda *_: None,
    ) -> None:
        self.api = api
        self.writes = WorkloadWrites(api)
        self.settings = settings
        self.priority_classes = priority_classes
        self.workloads_of = workloads_of
        self.watch_workloads = watch_workloads
        self.metrics = metrics
        self.multikueue = MultiKueueLookup(api)
        # The Workload each job's view() read, for after() in the same pass (a job is in one
        # worker at a time; no second read).
        self._read: dict[str, Obj | None] = {}
        self.priorities = PriorityFollower(api, emit_event, self._priority)

    def view(self, job_obj: Obj, pods: Sequence[Obj]) -> AdmissionVerdict:
        """Kueue's word on a job it holds, from the job's Workload (the module docstring)."""
        self.watch_workloads()  # Kueue may have been installed since the start
        try:
            return self._view(job_obj, pods)
        except KueueNotServed as exc:
            self._read.pop(job_obj["metadata"]["uid"], None)
            return self._waiting(
                f"Kueue's Workload API is not served here (HTTP {exc.status}: Kueue is not "
                f"installed, or the operator may not use it): install Kueue, or remove the "
                f"job's {QUEUE_LABEL} label to use the built-in admission"
            )

    def _view(self, job_obj: Obj, pods: Sequence[Obj]) -> AdmissionVerdict:
        job = Job.from_object(job_obj)
        held = [p for p in pods if (p.get("status") or {}).get("phase") not in _FINISHED_POD_PHASES]
        name = workload_name(job)
        far = dispatched(job_obj)  # MultiKueue's, whatever the mode: it never leaves Kueue
        if self.settings.admission != "kueue" and queue_of(job_obj) is None and not far:
            return self._hand_over(self.api.get_workload(job.namespace, name), held)
        queue = queue_of(job_obj) or self.settings.kueue_default_queue
        if not queue and far:
            return self._waiting(
                f"spec.managedBy says Kueue's MultiKueue dispatches this job, and it names no "
                f"LocalQueue: label it {QUEUE_LABEL}=<a LocalQueue of namespace "
                f"{job.namespace} that leads to MultiKueue>",
                REASON_NO_LOCAL_QUEUE,
            )
        if not queue:
            if held:
                return self._withdrawn("the job names no LocalQueue any more")
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
        prebuilt = prebuilt_workload(job_obj)  # a worker's copy: MultiKueue made it
        name = prebuilt or name
        workload = self.api.get_workload(job.namespace, name)
        self._read[job.uid] = workload
        if workload is None:
            if held:  # pods never run beside an admission they do not hold
                return self._withdrawn(f"its Workload {name} is gone")
            if prebuilt:
                return self._waiting(
                    f"waiting for Workload {name}, which MultiKueue makes for this copy of "
                    f"the job (the job is never given a Workload of its own here)",
                    REASON_PREBUILT_WORKLOAD,
                )
            return self._create(job_obj, job, queue, name)
        if prebuilt and not self._adopted(workload, job):
            return self._waiting(
                f"Workload {name}, named by the job's {PREBUILT_WORKLOAD_ANNOTATION} "
                f"annotation, belongs to another object: it is not this job's to run",
                REASON_PREBUILT_WORKLOAD,
            )
        if (workload.get("metadata") or {}).get("deletionTimestamp"):
            if held:
                return self._withdrawn(f"its Workload {name} is being deleted")
            self.writes.let_go([workload], None)  # it goes, and a new one is made after it
            return self._waiting(f"Workload {name} is being deleted; a new one follows")
        if not prebuilt:  # MultiKueue's copy: its spec is the manager's, never changed here
            self.priorities.follow(job_obj, job, workload)
        active = (workload.get("spec") or {}).get("active", True) is not False
        ours = ((workload["metadata"].get("annotations") or {}).get(ANNOTATION_SUSPENDED_BY_JOB)
                == "true")  # fmt: skip
        if job.spec.suspend:
            if active and not held:  # the quota goes back only now
                self.writes.set_active(workload, False)
            elif not active:
                self._release_if_stopped(workload, held)
            return self._waiting("the job is suspended (spec.suspend)")
        if not active and ours:
            self.writes.set_active(workload, True)
            return self._waiting(f"the job was resumed: Workload {name} queues again")
        if not active:
            self._release_if_stopped(workload, held)
            return self._deactivated(workload, name, job.namespace)
        said = verdict(workload)
        if said.evicted is not None:
            reason, message = said.evicted
            if held:  # the planner stops the gang (SIGTERM: a checkpoint is written)
                stop = f"Kueue evicted it ({reason}): {message}"
                return AdmissionVerdict(by=self.name, admitted=False, stop=stop)
            self._release_if_stopped(workload, held)
            return self._waiting(f"Kueue evicted it ({reason}): {message}; queued again")
        if not said.admitted:
            where = f"LocalQueue {queue}" + (
                f", ClusterQueue {said.cluster_queue}" if said.cluster_queue else ""
            )
            if held:
                return self._withdrawn(f"Kueue ({where}) no longer admits it: {said.waiting}")
            return self._waiting(f"Kueue ({where}): {said.waiting}")
        if far:  # it runs where MultiKueue sent it; nothing to place here
            where = cluster_name(workload) or "a worker cluster"
            return AdmissionVerdict(
                by=self.name, admitted_message=f"MultiKueue dispatched it to {where}"
            )
        return self._admitted(job_obj, job, workload, pods)

    def _create(self, job_obj: Obj, job: Job, queue: str, name: str) -> AdmissionVerdict:
        if not dispatched(job_obj):
            route = self.multikueue.route(job.namespace, queue)
            if route is not None:  # Kueue's webhooks default managedBy; ours is not there
                return self._waiting(route.needs_managed_by(), REASON_MANAGED_BY_REQUIRED)
        priority = self._priority(job_obj, job)
        if isinstance(priority, str):
            return self._waiting(priority)
        # At its maximum: an elastic job's status may hold the size of an earlier
        # admission, and Kueue's partial admission picks the size from minCount up.
        full = Job.from_object(job_obj, size=FULL_SIZE)
        body = build_workload(full, queue, self.settings, priority)
        if self.api.create_workload(body):
            log.info("created Workload %s/%s in LocalQueue %s", job.namespace, name, queue)
        return self._waiting(f"Workload {name} submitted to LocalQueue {queue}")

    def _admitted(
        self, job_obj: Obj, job: Job, workload: Obj, pods: Sequence[Obj]
    ) -> AdmissionVerdict:
        """The gang's size and the placement of its pods not created yet."""
        admitted = AdmissionVerdict(
            by=self.name, admitted_message=admitted_message(workload), announce_changes=True
        )
        size = self._elastic_size(job, workload)
        if size is not None:  # the gang is built at the workers Kueue admitted
            job = Job.from_object(job_obj, size=size)
            admitted = replace(admitted, elastic_size=size)
        sets = pod_sets(job, self.settings)
        if prebuilt_workload(job_obj) and (differs := self._out_of_sync(job_obj, workload)):
            # Made on the manager from the same spec: only operators that build the gang
            # differently (other versions) disagree. Said on the job, whose status
            # MultiKueue copies back, rather than re-dispatched without end.
            message = (
                f"the Workload MultiKueue made for this copy does not match its gang: {differs}"
            )
            self.writes.finish(workload, "FailedToStart", message, None)
            return replace(admitted, admitted=False, fail=(REASON_ADMISSION_CONFLICT, message))
        present = {str(p.get("metadata", {}).get("name")) for p in pods}
        if all(pod in present for s in sets for pod in s.pods):
            return admitted  # nothing to place: no flavor to read
        flavors = {f: (self.api.get_resource_flavor(f) or {}).get("spec") or {}
                   for f in flavors_of(workload)}  # fmt: skip
        try:
            by_set = placements(workload, flavors)
            by_pod = {
                pod: indexed(by_set[pod_set.name], LABEL_POD_SET_INDEX, index)
                for pod_set in sets if pod_set.name in by_set
                for index, pod in enumerate(pod_set.pods)
            }  # fmt: skip
            for manifest in build_pods(job, 0, self.settings):  # what place() will meet
                if (name := manifest["metadata"]["name"]) in by_pod:
                    place(manifest, by_pod[name])
        except PlacementConflict as exc:
            # It can never start as admitted: the quota goes back and the job fails, as
            # Kueue's integrations finish such a Workload.
            message = f"Kueue's admission cannot be applied to the pods: {exc}"
            self.writes.finish(workload, "FailedToStart", message, None)
            return replace(admitted, admitted=False, fail=(REASON_ADMISSION_CONFLICT, message))
        return replace(admitted, placements=by_pod)

    def _out_of_sync(self, job_obj: Obj, workload: Obj) -> str | None:
        """How a prebuilt Workload's podSets differ from the gang's (names and counts, at
        the job's full size, as its Workload is built), or None."""
        full = Job.from_object(job_obj, size=FULL_SIZE)
        want = {p.name: p.count for p in pod_sets(full, self.settings)}
        have = {str(p.get("name")): int(p.get("count") or 0)
                for p in (workload.get("spec") or {}).get("podSets") or []}  # fmt: skip
        if want == have:
            return None
        return f"podSets {have} where this cluster's operator builds {want}"

    def _hand_over(self, workload: Obj | None, held: Sequence[Obj]) -> AdmissionVerdict:
        """The job's queue label was removed: its gang stops, its Workload goes (its quota
        back at once), and the built-in admission takes the job from the next pass."""
        if held:
            return self._withdrawn(
                f"the job's {QUEUE_LABEL} label was removed: it leaves Kueue for the "
                f"built-in admission"
            )
        if workload is not None:
            self.writes.delete(workload)
        return AdmissionVerdict(
            by=AdmissionBackendName.BUILTIN,
            admitted=False,
            reason=REASON_WAITING_FOR_ADMISSION,
            message=f"the job's {QUEUE_LABEL} label was removed: its Kueue Workload is "
            f"deleted and it waits for the built-in admission",
        )

    def _release_if_stopped(self, workload: Obj, held: Sequence[Obj]) -> None:
        """Once the stopped gang's pods are gone, hand the admission back (a Workload that
        keeps it would look admitted when it is active again)."""
        if held or (condition(workload, "QuotaReserved") or {}).get("status") != "True":
            return
        evicted = condition(workload, "Evicted") or {}
        reason = str(evicted.get("reason") or REASON_DEACTIVATED)
        self.writes.release(workload, reason, str(evicted.get("message") or "stopped"))

    def _deactivated(self, workload: Obj, name: str, namespace: str) -> AdmissionVerdict:
        """Deactivated by Kueue or an admin: stopped for good, saying who and why."""
        why = deactivation_cause(workload)
        return AdmissionVerdict(
            by=self.name,
            admitted=False,
            reason=REASON_DEACTIVATED,
            stop=(
                f"Kueue deactivated its Workload {name} ({why}; by Kueue or an admin): the "
                f"job stays stopped until the Workload is active again (kueuectl resume "
                f"workload {name} -n {namespace}, or set its spec.active to true)"
            ),
            stop_reason=REASON_DEACTIVATED,
        )

    def _withdrawn(self, why: str) -> AdmissionVerdict:
        return AdmissionVerdict(
            by=self.name,
            admitted=False,
            stop=f"{why}: the gang stops, and the job queues again once its pods are gone",
            stop_reason=REASON_ADMISSION_WITHDRAWN,
        )

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

    def _waiting(self, message: str, reason: str = REASON_WAITING_FOR_KUEUE) -> AdmissionVerdict:
        return AdmissionVerdict(by=self.name, admitted=False, message=message, reason=reason)

    def _adopted(self, workload: Obj, job: Job) -> bool:
        """A prebuilt Workload is the job's once it controls it: owned (deleting the job
        deletes it) and labelled with the job's uid, as Kueue's jobframework adopts one
        (EnsurePrebuiltWorkloadOwnership); its spec is never changed. False when another
        object controls it."""
        meta = workload["metadata"]
        owners = meta.get("ownerReferences") or []
        controller = next((o for o in owners if o.get("controller")), None)
        if controller is not None:
            return bool(controller.get("uid") == job.uid)
        ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": job.name,
               "uid": job.uid, "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        patch = {"metadata": {"ownerReferences": [*owners, ref],
                              "labels": {JOB_UID_LABEL: job.uid},
                              "resourceVersion": meta["resourceVersion"]}}  # fmt: skip
        self.api.patch_workload(job.namespace, meta["name"], patch)
        log.info("adopted Workload %s/%s, made by MultiKueue for this copy of the job",
                 job.namespace, meta["name"])  # fmt: skip
        return True

    def after(
        self, job_obj: Obj, old: dict[str, Any], new: dict[str, Any], deleted_pods: bool
    ) -> None:
        """After the pass: the Workload's PodsReady and Finished follow the job's phase."""
        if self.metrics is not None and admitted_in(new) and not admitted_in(old):
            observe_admission_wait(self.metrics, job_obj, old)
        uid = job_obj["metadata"]["uid"]
        phase = str(new.get("phase"))
        workload = self._read.pop(uid, None)
        if phase in TERMINAL_PHASES:
            self._finished(job_obj, phase)
        elif workload is not None and (workload.get("spec") or {}).get("active") is not False:
            self.writes.pods_ready(workload, phase)

    def _finished(self, job_obj: Obj, phase: str) -> None:
        """The job ended: its Workload Finished, so that Kueue gives its quota back."""
        job = Job.from_object(job_obj)
        try:
            name = prebuilt_workload(job_obj) or workload_name(job)
            workload = self.api.get_workload(job.namespace, name)
        except KueueNotServed:
            return
        if workload is None:
            return
        reason = "Succeeded" if phase == JobPhase.SUCCEEDED else "Failed"
        when = (job_obj.get("status") or {}).get("completionTime")
        self.writes.finish(workload, reason, f"the DistributedTrainingJob {phase.lower()}", when)

    def forget(self, key: JobKey, job: Obj | None) -> None:
        """A Workload left behind would hold its Kueue quota."""
        if job is not None:
            self._read.pop(job["metadata"]["uid"], None)
            self.priorities.forget(job["metadata"]["uid"])
        self.writes.let_go(self.workloads_of(*key), None)


def deactivation_cause(workload: Obj) -> str:
    """Why the Workload is inactive, as far as Kueue says: its Deactivated eviction's message
    ("... due to exceeding the maximum number of re-queuing retries", Kueue 0.17), else the
    DeactivationTarget Kueue set, else "its spec.active is false"; and the evictions that led
    there (schedulingStats, e.g. "after evictions PodsReadyTimeout x2"), which is all that a
    Kueue that kept an earlier eviction's condition (0.19) leaves of the cause."""
    evicted = condition(workload, "Evicted") or {}
    target = condition(workload, "DeactivationTarget") or {}
    if evicted.get("status") == "True" and str(evicted.get("reason", "")).startswith("Deactivated"):
        why = str(evicted.get("message") or "deactivated")
    elif target.get("status") == "True":
        why = f"to be deactivated: {target.get('message') or target.get('reason')}"
    else:
        why = "its spec.active is false"
    stats = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
    before = [f"{e.get('reason')} x{e.get('count')}" for e in stats
              if not str(e.get("reason", "")).startswith("Deactivated")]  # fmt: skip
    return why + (f"; after evictions {', '.join(before)}" if before else "")
