"""The Workload that stands for a job in Kueue (pure; docs/design/kueue-contract.md).

One podSet per group of identical pods, in rank order: the workers, the parameter servers,
the pipeline stages (one podSet per stage group of a heterogeneous pipeline, whose pods ask
for different resources). Each podSet's template is cut from the very pods the builders
make, so Kueue counts exactly the requests the gang will carry, extended resources and
init containers included, and matches flavors against the same nodeSelector, affinity and
tolerations. What varies with the gang generation or the rank (env, labels, names) is left
out: the Workload must stay the same across gang restarts.

An elastic job's Workload is built at its maximum, whatever size it runs at, and its worker
podSet carries `minCount: minReplicas`: Kueue's partial admission (feature gate
PartialAdmission, on by default) then admits it at the most workers that fit, no fewer than
the minimum, and the gang is built at that count (docs/kueue.md, "Elastic jobs").
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtjob_api import GROUP, KIND, VERSION
from dtjob_operator.builders.children import build_pods
from dtjob_operator.builders.job import Job
from dtjob_operator.constants import (
    KUEUE_GROUP,
    KUEUE_QUEUE_LABEL,
    KUEUE_VERSION,
    LABEL_JOB_NAME,
    LABEL_POD_SET_INDEX,
    LABEL_ROLE,
)
from dtjob_operator.settings import OperatorSettings

QUEUE_LABEL = KUEUE_QUEUE_LABEL
PRIORITY_LABEL = f"{KUEUE_GROUP}/priority-class"
JOB_UID_LABEL = f"{KUEUE_GROUP}/job-uid"
FINALIZER = f"{KUEUE_GROUP}/resource-in-use"
# Kueue takes at most 8 podSets: the most a job makes is 8, a stage group each (the API
# bounds roles.stage.groups to 8; a unit test keeps the two in step).
MAX_POD_SETS = 8
# Pod spec fields Kueue reads to count a pod and match it to flavors and nodes.
_SCHEDULING_FIELDS = (
    "nodeSelector", "affinity", "tolerations", "priorityClassName", "runtimeClassName",
    "overhead", "topologySpreadConstraints",
)  # fmt: skip
_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")


@dataclass(frozen=True)
class PodSet:
    """Pods of one role and one shape, in rank order."""

    name: str
    role: str
    template: dict[str, Any]
    pods: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.pods)


@dataclass(frozen=True)
class Priority:
    """What the Workload's priority comes from: a WorkloadPriorityClass (the job's
    kueue.x-k8s.io/priority-class label) or the pods' PriorityClass, with its value (without
    Kueue's webhook, the operator fills in what it would default)."""

    kind: str
    name: str
    value: int

    def ref(self) -> dict[str, str]:
        group = KUEUE_GROUP if self.kind == "WorkloadPriorityClass" else "scheduling.k8s.io"
        return {"group": group, "kind": self.kind, "name": self.name}


def queue_of(job: Mapping[str, Any]) -> str | None:
    """The LocalQueue a job asks for (its kueue.x-k8s.io/queue-name label), if any."""
    value = (job.get("metadata", {}).get("labels") or {}).get(QUEUE_LABEL)
    return str(value) if value else None


def workload_name(job: Job) -> str:
    """Kueue's own derivation (jobframework GetWorkloadNameForOwnerWithGVK): lowercased kind,
    the job's name cut to fit, and 5 hex digits of a hash of kind, group, name and uid, so
    a re-created job of the same name gets a Workload of its own."""
    digest = hashlib.sha1(f"{KIND}\n{GROUP}\n{job.name}\n{job.uid}".encode()).hexdigest()
    return f"{KIND.lower()}-{job.name}"[:247] + "-" + digest[:5]


def _template(pod: dict[str, Any]) -> dict[str, Any]:
    spec = pod["spec"]
    kept: dict[str, Any] = {k: spec[k] for k in _SCHEDULING_FIELDS if k in spec}
    for kind in ("initContainers", "containers"):
        if spec.get(kind):
            kept[kind] = [{k: c[k] for k in _CONTAINER_FIELDS if k in c} for c in spec[kind]]
    kept["restartPolicy"] = "Never"
    return {"spec": kept}


def pod_sets(job: Job, settings: OperatorSettings) -> list[PodSet]:
    """The gang as podSets: consecutive pods of one role and one template form one."""
    out: list[PodSet] = []
    for pod in build_pods(job, 0, settings):
        role, name = pod["metadata"]["labels"][LABEL_ROLE], pod["metadata"]["name"]
        template = _template(pod)
        last = out[-1] if out else None
        if last is not None and last.role == role and last.template == template:
            out[-1] = PodSet(last.name, role, template, (*last.pods, name))
            continue
        earlier = sum(1 for p in out if p.role == role)
        out.append(PodSet(role if earlier == 0 else f"{role}-{earlier}", role, template, (name,)))
    return out


def topology_request(job: Job, sets: list[PodSet], pod_set: PodSet) -> dict[str, Any]:
    """The podSet's topologyRequest: the job's spec.placement.topology level, and always the
    pod index label, so that wherever Kueue places by topology (a job's request, or a
    ClusterQueue of topology flavors only) its ungater places the ranks in order. A job of
    two podSets, one of a single pod (a parameter server and its workers), is one group:
    Kueue packs both into the same domain. Kueue groups no more than two podSets; larger
    mixes are each packed on their own (docs/kueue.md)."""
    request: dict[str, Any] = {"podIndexLabel": LABEL_POD_SET_INDEX}
    placement = job.spec.placement
    topology = placement.topology if placement is not None else None
    if topology is None:
        return request
    request["required" if topology.required else "preferred"] = topology.level
    if len(sets) == 2 and min(s.count for s in sets) == 1:
        request["podSetGroupName"] = "gang"
    return request


def min_count(job: Job, pod_set: PodSet) -> int | None:
    """The podSet's minCount: an elastic job's minReplicas on its worker podSet (elastic
    jobs are workers-only gangs, so one podSet: Kueue takes minCount on at most one)."""
    worker = (job.declared or job.spec).roles.worker
    if pod_set.role != "worker" or worker is None or worker.minReplicas is None:
        return None
    return worker.minReplicas if worker.minReplicas < pod_set.count else None


def build_workload(
    job: Job, queue: str, settings: OperatorSettings, priority: Priority | None = None
) -> dict[str, Any]:
    """The Workload for `job` (built at its full size: Job.from_object(obj, FULL_SIZE)) in
    LocalQueue `queue`, owned by the job (deleting the job deletes it) and kept until the
    operator lets go of it (the finalizer)."""
    metadata: dict[str, Any] = {
        "name": workload_name(job),
        "namespace": job.namespace,
        # The job's name, as on its pods: the operator's watch of Workloads wakes the job.
        "labels": {JOB_UID_LABEL: job.uid, LABEL_JOB_NAME: job.name},
        "finalizers": [FINALIZER],
        "ownerReferences": [
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": job.name,
             "uid": job.uid, "controller": True, "blockOwnerDeletion": True}
        ],
    }  # fmt: skip
    sets = pod_sets(job, settings)
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [
            {"name": p.name, "count": p.count, "template": p.template,
             "topologyRequest": topology_request(job, sets, p)}
            | ({"minCount": least} if (least := min_count(job, p)) is not None else {})
            for p in sets
        ],
    }  # fmt: skip
    if priority is not None:
        spec |= {"priorityClassRef": priority.ref(), "priority": priority.value}
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": metadata,
        "spec": spec,
    }
