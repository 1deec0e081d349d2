"""The Kueue admission backend's reads and writes (docs/design/kueue-contract.md, section 8):
for a job labelled kueue.x-k8s.io/queue-name, what the planner's admission inputs are, from
the job's Workload; and the Workload's own lifecycle (created while the job waits, Finished
when the job ends).

The planner does not learn which backend answered: it gets `admitted`, a message and reason
while it waits, `preempted` when Kueue evicts a running gang, and the pods' placements.
Built so far: create, wait with Kueue's message, admit with the flavors' placement, stop an
evicted gang, Finished. Not yet: clearing the admission after an eviction, PodsReady,
suspend as spec.active, a Workload cache and watch (it is read per reconcile).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from dtjob_api.status import JobPhase
from dtjob_operator.builders import Job
from dtjob_operator.constants import REASON_WAITING_FOR_KUEUE
from dtjob_operator.k8s import KubeApi
from dtjob_operator.kueue.verdict import (
    Placement,
    PlacementConflict,
    condition,
    flavors_of,
    placements,
    verdict,
)
from dtjob_operator.kueue.workload import build_workload, pod_sets, queue_of, workload_name
from dtjob_operator.settings import OperatorSettings

log = logging.getLogger(__name__)
Obj = dict[str, Any]
# Field manager of the Finished condition: Kueue reads the condition whoever wrote it, and a
# manager of our own leaves the conditions Kueue applies under its managers alone.
FINISHED_MANAGER = "dtjob-operator-finished"


class KueueBackend:
    """What Kueue says about a job, and the Workload kept in step with the job."""

    def __init__(self, api: KubeApi, settings: OperatorSettings) -> None:
        self.api = api
        self.settings = settings

    def view(
        self, job_obj: Obj, pods: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Placement]]:
        """(the planner's admission inputs, pod name -> placement) for a labelled job."""
        job = Job.from_object(job_obj)
        queue = queue_of(job_obj) or ""
        name = workload_name(job)
        workload = self.api.get_workload(job.namespace, name)
        if workload is None:
            created = self.api.create_workload(build_workload(job, queue, self.settings))
            if created:
                log.info("created Workload %s/%s in LocalQueue %s", job.namespace, name, queue)
            return self._waiting(f"Workload {name} submitted to LocalQueue {queue}"), {}
        said = verdict(workload)
        if said.evicted is not None and pods:
            reason, message = said.evicted
            return {"admitted": False, "preempted": f"Kueue evicted it ({reason}): {message}"}, {}
        if not said.admitted:
            where = f"LocalQueue {queue}" + (
                f", ClusterQueue {said.cluster_queue}" if said.cluster_queue else ""
            )
            return self._waiting(f"Kueue ({where}): {said.waiting}"), {}
        flavors = {f: (self.api.get_resource_flavor(f) or {}).get("spec") or {}
                   for f in flavors_of(workload)}  # fmt: skip
        try:
            by_set = placements(workload, flavors)
        except PlacementConflict as exc:
            return self._waiting(f"Kueue's admission cannot be applied: {exc}"), {}
        by_pod = {
            pod: by_set[pod_set.name]
            for pod_set in pod_sets(job, self.settings)
            if pod_set.name in by_set
            for pod in pod_set.pods
        }
        return {"admitted": True}, by_pod

    @staticmethod
    def _waiting(message: str) -> dict[str, Any]:
        return {
            "admitted": False,
            "admission_message": message,
            "admission_reason": REASON_WAITING_FOR_KUEUE,
        }

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
