"""The job as the builders see it, and what every child shares: owner reference, labels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtjob_api import GROUP, KIND, VERSION
from dtjob_api.aliases import resolve
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_operator.constants import LABEL_JOB_NAME, LABEL_MANAGED_BY, MANAGED_BY

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

    def __post_init__(self) -> None:
        # Every builder, policy and status reads the strategy that runs, whoever made the Job.
        object.__setattr__(self, "spec", resolve(self.spec))

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Job:
        """From the object as the API returns it; raises pydantic.ValidationError when the
        spec does not parse."""
        meta = obj["metadata"]
        return cls(
            name=meta["name"],
            namespace=meta.get("namespace", "default"),
            uid=meta.get("uid", ""),
            spec=DistributedTrainingJobSpec.model_validate(obj.get("spec") or {}),
        )


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
