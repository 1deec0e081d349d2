"""The job as the builders see it, and what every child shares: owner reference, labels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtjob_api import GROUP, KIND, VERSION
from dtjob_api.aliases import resolve
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_operator.constants import LABEL_JOB_NAME, LABEL_MANAGED_BY, MANAGED_BY
from dtjob_operator.envcontract import RankLayout, rank_layout

API_VERSION = f"{GROUP}/{VERSION}"
Manifest = dict[str, Any]


@dataclass(frozen=True)
class Job:
    """A DistributedTrainingJob's identity and parsed (defaulted) spec, a tf.distribute
    alias resolved to the strategy that runs (api/aliases.py)."""

    name: str
    namespace: str
    uid: str
    spec: DistributedTrainingJobSpec
    """The spec of the gang that runs: an elastic job's at its current size."""
    declared: DistributedTrainingJobSpec | None = None
    """The spec as written, where it differs (an elastic job below its maximum): the job
    config the trainer reads is this one, and WORLD_SIZE gives the size (env contract)."""

    def __post_init__(self) -> None:
        # Every builder, policy and status reads the strategy that runs, whoever made the Job.
        object.__setattr__(self, "spec", resolve(self.spec))
        if self.declared is not None:
            object.__setattr__(self, "declared", resolve(self.declared))

    @property
    def layout(self) -> RankLayout:
        """rank_layout(spec), made once: every pod's builder reads the whole gang's, and
        made per pod it cost a 64-pod gang 64 x 64 slots (a 512-pod one 262,144). Not a
        functools.cached_property: on Python 3.11 (the images') its getter takes one lock
        for every instance, and the reconcile workers queued on it."""
        found: RankLayout | None = self.__dict__.get("_layout")
        if found is None:
            found = rank_layout(self.spec)
            object.__setattr__(self, "_layout", found)  # a frozen dataclass's memo
        return found

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], size: int | None = None) -> Job:
        """From the object as the API returns it, an elastic job at `size` worker pods (by
        default its status.elastic.replicas, else its maximum); raises
        pydantic.ValidationError when the spec does not parse."""
        meta = obj["metadata"]
        spec = DistributedTrainingJobSpec.model_validate(obj.get("spec") or {})
        sized = at_size(spec, size if size is not None else elastic_size(obj))
        return cls(
            name=meta["name"],
            namespace=meta.get("namespace", "default"),
            uid=meta.get("uid", ""),
            spec=sized,
            declared=spec if sized is not spec else None,
        )


FULL_SIZE = 0
"""from_object(size=FULL_SIZE): an elastic job at its maximum, whatever its status says."""


def elastic_size(obj: Mapping[str, Any]) -> int | None:
    """The worker pods the admission gave an elastic job (status.elastic.replicas)."""
    size = ((obj.get("status") or {}).get("elastic") or {}).get("replicas")
    return size if isinstance(size, int) and size > 0 else None


def is_elastic(obj: Mapping[str, Any]) -> bool:
    """The job's workers have a minReplicas: its gang's size can change (at_size); any
    other job's gang is the same at every size asked."""
    roles = (obj.get("spec") or {}).get("roles")
    worker = roles.get("worker") if isinstance(roles, Mapping) else None
    return isinstance(worker, Mapping) and worker.get("minReplicas") is not None


def at_size(spec: DistributedTrainingJobSpec, size: int | None) -> DistributedTrainingJobSpec:
    """An elastic spec with `size` worker pods; any other spec, or a size outside
    [minReplicas, replicas], unchanged."""
    worker = spec.roles.worker
    if size is None or worker is None or worker.minReplicas is None:
        return spec
    if not worker.minReplicas <= size <= worker.replicas or size == worker.replicas:
        return spec
    roles = spec.roles.model_copy(update={"worker": worker.model_copy(update={"replicas": size})})
    return spec.model_copy(update={"roles": roles})


def owner_reference(job: Job) -> dict[str, Any]:
    """The controller owner reference every child carries: Kubernetes' garbage collector
    deletes the children with the job, and blockOwnerDeletion keeps a foreground delete of
    the job waiting until they are gone."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_labels(job: Job) -> dict[str, str]:
    """Labels of every child: which job it belongs to and who manages it."""
    return {LABEL_JOB_NAME: job.name, LABEL_MANAGED_BY: MANAGED_BY}


def child_metadata(job: Job, name: str, labels: Mapping[str, str] | None = None) -> Manifest:
    """metadata of a child object: name, namespace, labels, owner reference."""
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": {**job_labels(job), **(labels or {})},
        "ownerReferences": [owner_reference(job)],
    }
