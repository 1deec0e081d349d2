"""Kueue's MultiKueue, as it meets a DistributedTrainingJob (docs/multikueue.md).

Two clusters see the same job:
- **the manager**, where it was applied with `spec.managedBy: kueue.x-k8s.io/multikueue`:
  the operator makes its Workload as for any Kueue job and keeps it in step (PodsReady and
  Finished follow the status MultiKueue copies back), but never creates a pod and never
  writes the job's status: MultiKueue's copy of the worker's status is its only writer;
- **a worker**, where MultiKueue's generic adapter (Kueue's externalframeworks/adapter.go)
  created a copy without `managedBy`, labelled with its origin, and naming in an annotation
  the Workload the manager's Kueue made here (already admitted by this cluster's Kueue):
  the operator adopts that Workload (controller reference and job-uid label, as Kueue's
  jobframework does for a prebuilt Workload), never changes its spec, and runs the job.

Pure, but for `MultiKueueLookup`, which reads a LocalQueue, its ClusterQueue and their
AdmissionChecks to tell whether a queue leads to MultiKueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dtjob_api.contract import MANAGED_BY_MULTIKUEUE
from dtjob_api.multikueue import multikueue_route
from dtjob_operator.constants import KUEUE_GROUP

if TYPE_CHECKING:  # the planner imports the pure part; only the lookup calls the API
    from dtjob_operator.kueue.api import KueueApi

Obj = dict[str, Any]
# What MultiKueue puts on the worker's copy (jobframework SetMultiKueueMeta): the name of
# the Workload made for it, an annotation since Kueue 0.18 (WorkloadIdentifierAnnotations),
# a label before; and the manager it came from.
PREBUILT_WORKLOAD_ANNOTATION = f"{KUEUE_GROUP}/prebuilt-workload-name"
PREBUILT_WORKLOAD_LABEL = f"{KUEUE_GROUP}/prebuilt-workload-name"
ORIGIN_LABEL = f"{KUEUE_GROUP}/multikueue-origin"


def dispatched(job: Mapping[str, Any]) -> bool:
    """Whether the job runs on another cluster MultiKueue sends it to (its spec.managedBy)."""
    spec = job.get("spec")
    return isinstance(spec, Mapping) and spec.get("managedBy") == MANAGED_BY_MULTIKUEUE


def prebuilt_workload(job: Mapping[str, Any]) -> str | None:
    """The Workload made for this job elsewhere (a worker's copy), as Kueue reads it
    (jobframework PrebuiltWorkloadNameFor): the annotation, else the label."""
    meta = job.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(PREBUILT_WORKLOAD_ANNOTATION) or (
        meta.get("labels") or {}
    ).get(PREBUILT_WORKLOAD_LABEL)
    return str(name) if name else None


def origin(job: Mapping[str, Any]) -> str | None:
    """The manager a worker's copy came from (its multikueue-origin label)."""
    value = ((job.get("metadata") or {}).get("labels") or {}).get(ORIGIN_LABEL)
    return str(value) if value else None


def cluster_name(workload: Mapping[str, Any]) -> str | None:
    """The worker cluster MultiKueue dispatched the Workload to (status.clusterName)."""
    value = (workload.get("status") or {}).get("clusterName")
    return str(value) if value else None


def check_state(workload: Mapping[str, Any], check: str | None) -> Mapping[str, Any]:
    """The state of AdmissionCheck `check` on the Workload ({} when not there)."""
    for state in (workload.get("status") or {}).get("admissionChecks") or []:
        if state.get("name") == check:
            return dict(state)
    return {}


@dataclass(frozen=True)
class MultiKueueRoute:
    """A LocalQueue that leads to MultiKueue: its ClusterQueue and the AdmissionCheck."""

    local_queue: str
    cluster_queue: str
    check: str

    def needs_managed_by(self) -> str:
        """What a job without spec.managedBy sent to this queue is told."""
        return (
            f"LocalQueue {self.local_queue} leads to ClusterQueue {self.cluster_queue}, which "
            f"sends its jobs to other clusters through MultiKueue (AdmissionCheck "
            f"{self.check}): such a job needs spec.managedBy: {MANAGED_BY_MULTIKUEUE}, which "
            f"cannot be set after creation: delete the job and apply it again with the field "
            f"set (kubectl dtj submit sets it), or send it to a queue of this cluster"
        )


class MultiKueueLookup:
    """Whether a job's LocalQueue leads to MultiKueue, read from Kueue's objects
    (dtjob_api.multikueue, which `kubectl dtj submit` uses too)."""

    def __init__(self, api: KueueApi) -> None:
        self.api = api

    def _read(self, namespace: str | None, plural: str, name: str) -> Obj | None:
        if plural == "localqueues":
            return self.api.get_local_queue(str(namespace), name)
        if plural == "clusterqueues":
            return self.api.get_cluster_queue(name)
        return self.api.get_admission_check(name)

    def route(self, namespace: str, local_queue: str) -> MultiKueueRoute | None:
        """The MultiKueue route of `local_queue`, or None (a queue of this cluster, or one
        that does not exist yet: Kueue's own message says so once the Workload is made)."""
        found = multikueue_route(self._read, namespace, local_queue)
        return MultiKueueRoute(local_queue, *found) if found else None
