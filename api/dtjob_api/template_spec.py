"""The role pod template's API model: a Kubernetes PodTemplateSpec (docs/api.md, "The pod
template"). Its core/v1 parts stay dicts in Python; the CRD carries their real schema."""

from typing import Annotated, Any, cast

from pydantic import ConfigDict, Field, JsonValue, WithJsonSchema

from dtjob_api.base import ApiModel

# Kubernetes core/v1 objects (a PodSpec, a Toleration, ...) stay dicts in Python; in the CRD
# the marker is replaced by the real core/v1 schema (coreschema.py), so the API server
# checks them. The operator checks only what that schema cannot say (template_rules.py).
CORE_TYPE = "x-dtjob-core-type"


def _core(name: str) -> WithJsonSchema:
    return WithJsonSchema({CORE_TYPE: name})


CorePodSpec = Annotated[dict[str, Any], _core("PodSpec")]
Toleration = Annotated[dict[str, Any], _core("Toleration")]
Affinity = Annotated[dict[str, Any], _core("Affinity")]
Volume = Annotated[dict[str, Any], _core("Volume")]
VolumeMount = Annotated[dict[str, Any], _core("VolumeMount")]
EnvVar = Annotated[dict[str, Any], _core("EnvVar")]
# Maps carry bounds so that the API server can estimate the cost of the CEL rules (they
# iterate over label keys) and a manifest cannot grow without limit.
Labels = Annotated[dict[str, str], Field(max_length=64)]


def _no_reserved_keys(kind: str) -> dict[str, str]:
    """labels or annotations, short and under metadata: no dtjob.io/* key (one rule for
    both places: each rule is repeated in the three roles' templates, and the CRD's size
    is a budget, test_crd.py)."""
    rule = (
        f"(!has(self.{kind}) || self.{kind}.all(k, !k.startsWith('dtjob.io/'))) && "
        f"(!has(self.metadata) || !has(self.metadata.{kind}) || "
        f"self.metadata.{kind}.all(k, !k.startsWith('dtjob.io/')))"
    )
    return {
        "rule": rule,
        "message": f"{kind} and metadata.{kind}: dtjob.io/* keys are reserved for the operator",
        "reason": "FieldValueForbidden",
    }


# What the API server refuses at apply: cheap, bounded rules (template_rules.py checks the
# rest, and these again, in the operator).
TEMPLATE_CEL = [
    {
        "rule": "!has(self.spec) || !has(self.spec.restartPolicy) "
        "|| self.spec.restartPolicy == 'Never'",
        "message": "spec.restartPolicy must be Never (or unset): the operator restarts the "
        "whole gang, see spec.runPolicy.restartPolicy of the job",
        "fieldPath": ".spec.restartPolicy",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.spec) || (!has(self.spec.hostname) && !has(self.spec.subdomain) "
        "&& !has(self.spec.nodeName))",
        "message": "spec.hostname and spec.subdomain are the operator's (stable pod DNS names), "
        "spec.nodeName the scheduler's (use nodeSelector or affinity)",
        "fieldPath": ".spec",
        "reason": "FieldValueForbidden",
    },
    _no_reserved_keys("labels"),
    _no_reserved_keys("annotations"),
]


class PodTemplateMetadata(ApiModel):
    """Labels and annotations of the role's pods (the rest of the metadata is the
    operator's: name, namespace, owner)."""

    labels: Labels | None = None
    """Extra pod labels; dtjob.io/* and app.kubernetes.io/managed-by are the operator's."""
    annotations: Labels | None = None
    """Extra pod annotations (at most 256 KiB in all); dtjob.io/* keys are the operator's."""


class PodTemplate(ApiModel):
    """A Kubernetes PodTemplateSpec for the pods of one role. The operator merges its
    contract into it (docs/api.md): the `trainer` container's env, ports, mounts and
    resources, its volumes, hostname/subdomain and labels; settings that would contradict
    the contract are refused, everything else is kept. The short fields below are the same
    as their namesakes under spec (env and volumeMounts: the trainer container's); setting
    a field both ways is refused, lists and maps are combined."""

    model_config = ApiModel.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": cast("list[JsonValue]", TEMPLATE_CEL)}
    )

    metadata: PodTemplateMetadata | None = None
    """Labels and annotations of the pods."""
    spec: CorePodSpec | None = None
    """A core/v1 PodSpec. A container named `trainer` is the training container (it is
    added when absent); restartPolicy, hostname and subdomain are the operator's."""
    labels: Labels | None = None
    """Extra pod labels (same as metadata.labels)."""
    annotations: Labels | None = None
    """Extra pod annotations (same as metadata.annotations)."""
    nodeSelector: Labels | None = None
    """Node labels the pods must match (same as spec.nodeSelector)."""
    tolerations: list[Toleration] | None = Field(default=None, max_length=64)
    """Tolerations (same as spec.tolerations)."""
    affinity: Affinity | None = None
    """Affinity (same as spec.affinity)."""
    volumes: list[Volume] | None = Field(default=None, max_length=64)
    """Extra volumes (same as spec.volumes)."""
    volumeMounts: list[VolumeMount] | None = Field(default=None, max_length=64)
    """Extra mounts of the trainer container."""
    env: list[EnvVar] | None = Field(default=None, max_length=256)
    """Extra environment of the trainer container; the contract's variables are refused."""
    priorityClassName: str | None = Field(default=None, max_length=253)
    """PriorityClass of these pods (overrides spec.priorityClassName of the job)."""
    schedulerName: str | None = Field(default=None, max_length=253)
    """Scheduler that places these pods (e.g. a gang scheduler)."""
    runtimeClassName: str | None = Field(default=None, max_length=253)
    """RuntimeClass of these pods (e.g. nvidia)."""
