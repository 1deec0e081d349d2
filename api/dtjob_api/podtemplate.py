"""A role's pod template as the operator reads it: the PodTemplateSpec with its short fields
folded in, and every part with the field path the user wrote it at (for error messages).

The short fields (`template.nodeSelector`, `template.env`, ...) are the same as their
namesakes under `template.spec` (`env` and `volumeMounts`: the trainer container's). Lists
and maps from both places are combined; a single value set in both places is refused by
template_rules.py, so folding never has to choose.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dtjob_api.contract import TRAINER_CONTAINER
from dtjob_api.template_spec import PodTemplate

# Short fields that are one value of the PodSpec; setting them in both places is refused.
SHORT_VALUES = (
    "nodeSelector",
    "affinity",
    "priorityClassName",
    "schedulerName",
    "runtimeClassName",
)
# Short fields that are PodSpec lists, appended after the spec's own items.
SHORT_POD_LISTS = ("tolerations", "volumes")
# Short fields that are lists of the trainer container, appended after its own items.
SHORT_TRAINER_LISTS = ("env", "volumeMounts")


@dataclass(frozen=True)
class At:
    """A part of the template and where the user wrote it."""

    path: str
    value: Any


def _spec(template: PodTemplate | None) -> dict[str, Any]:
    return template.spec if template is not None and template.spec else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    # The API server guarantees the core/v1 shape; a job that reaches the operator without
    # it (CRD installed without the schema) must still not crash the reconcile.
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def trainer_index(pod_spec: dict[str, Any]) -> int | None:
    """Position of the container named `trainer` in pod_spec.containers, if any."""
    for i, container in enumerate(_dicts(pod_spec.get("containers"))):
        if container.get("name") == TRAINER_CONTAINER:
            return i
    return None


def folded_pod_spec(template: PodTemplate | None) -> dict[str, Any]:
    """A copy of template.spec with the short fields folded in. The trainer container is
    there only when the user wrote one (or short env / volumeMounts for it)."""
    pod = copy.deepcopy(_spec(template))
    if template is None:
        return pod
    for name in SHORT_VALUES:
        value = getattr(template, name)
        if value is not None and name not in pod:
            pod[name] = copy.deepcopy(value)
    for name in SHORT_POD_LISTS:
        extra = getattr(template, name)
        if extra:
            pod[name] = [*_dicts(pod.get(name)), *copy.deepcopy(extra)]
    extras = {name: getattr(template, name) for name in SHORT_TRAINER_LISTS}
    if any(extras.values()):
        containers = _dicts(pod.get("containers"))
        index = trainer_index(pod)
        if index is None:
            containers.insert(0, {"name": TRAINER_CONTAINER})
            index = 0
        trainer = containers[index]
        for name, extra in extras.items():
            if extra:
                trainer[name] = [*_dicts(trainer.get(name)), *copy.deepcopy(extra)]
        pod["containers"] = containers
    return pod


def _metadata_map(template: PodTemplate | None, name: str) -> list[At]:
    if template is None:
        return []
    out = []
    if template.metadata is not None and getattr(template.metadata, name):
        out.append(At(f"metadata.{name}", getattr(template.metadata, name)))
    if getattr(template, name):
        out.append(At(name, getattr(template, name)))
    return out


def label_maps(template: PodTemplate | None) -> list[At]:
    """metadata.labels and the short labels, each with its path below the template."""
    return _metadata_map(template, "labels")


def annotation_maps(template: PodTemplate | None) -> list[At]:
    """metadata.annotations and the short annotations."""
    return _metadata_map(template, "annotations")


def merged(maps: list[At]) -> dict[str, str]:
    """The labels (or annotations) of several maps as one."""
    out: dict[str, str] = {}
    for m in maps:
        out.update(m.value)
    return out


def volumes(template: PodTemplate | None) -> list[At]:
    """Every volume the user defined: spec.volumes, then the short volumes."""
    out = [
        At(f"spec.volumes[{i}]", v) for i, v in enumerate(_dicts(_spec(template).get("volumes")))
    ]
    if template is not None and template.volumes:
        out += [At(f"volumes[{i}]", v) for i, v in enumerate(template.volumes)]
    return out


def containers(template: PodTemplate | None) -> list[At]:
    """Every container and init container of template.spec."""
    spec = _spec(template)
    return [
        At(f"spec.{kind}[{i}]", c)
        for kind in ("initContainers", "containers")
        for i, c in enumerate(_dicts(spec.get(kind)))
    ]


def trainer_items(template: PodTemplate | None, field: str) -> list[At]:
    """The trainer container's `field` (env or volumeMounts) items, from both places."""
    out: list[At] = []
    spec = _spec(template)
    index = trainer_index(spec)
    if index is not None:
        container = _dicts(spec.get("containers"))[index]
        out += [
            At(f"spec.containers[{index}].{field}[{i}]", v)
            for i, v in enumerate(_dicts(container.get(field)))
        ]
    short = getattr(template, field) if template is not None else None
    out += [At(f"{field}[{i}]", v) for i, v in enumerate(short or [])]
    return out


def mounts(template: PodTemplate | None) -> Iterator[At]:
    """Every volume mount of every container (the short volumeMounts: the trainer's)."""
    for container in containers(template):
        for i, mount in enumerate(_dicts(container.value.get("volumeMounts"))):
            yield At(f"{container.path}.volumeMounts[{i}]", mount)
    if template is not None:
        for i, mount in enumerate(template.volumeMounts or []):
            yield At(f"volumeMounts[{i}]", mount)
