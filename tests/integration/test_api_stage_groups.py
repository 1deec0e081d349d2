"""roles.stage.groups against the real API server: the CRD's CEL rules refuse bad group
sizes at apply, naming the field, and the operator's validation blames the same field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from integration.test_api_validation import create, jobs, manifest, refusal
from unit.operator.stage_group_cases import CPU, GOOD, GPU, STAGE_GROUP_BAD, hetero

from dtjob_api.validation import validate_job

__all__ = ["jobs"]  # the module-scoped fixture, shared


def _changed(path: str, value: Any, group: int | None = None) -> dict[str, Any]:
    spec = copy.deepcopy(hetero(CPU, GPU))
    target = spec["roles"]["stage"] if group is None else spec["roles"]["stage"]["groups"][group]
    target[path] = value
    return spec


ROLE_BAD = [
    (_changed("replicas", 4), "must add up to roles.stage.replicas"),
    (_changed("gpus", 1), "leave roles.stage.gpus 0"),
    (_changed("blocks", 1, group=0), "on every group or on none"),
    (_changed("name", "cpu", group=1), "Duplicate value"),
]


def test_a_hetero_job_is_accepted(jobs: Any, namespace: str) -> None:
    stored = create(jobs, namespace, manifest(GOOD, "hetero"))
    assert [g["name"] for g in stored["spec"]["roles"]["stage"]["groups"]] == ["cpu", "gpu"]


@pytest.mark.parametrize(("spec", "field", "words"), STAGE_GROUP_BAD)
def test_cross_field_rules_refuse_naming_the_field(
    jobs: Any, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    message = refusal(lambda: create(jobs, namespace, manifest(spec, "hetero")))
    assert field in message and words in message, message
    assert field in {e.field for e in validate_job(spec)}


@pytest.mark.parametrize(("spec", "words"), ROLE_BAD)
def test_bad_group_sizes_are_refused_naming_the_field(
    jobs: Any, namespace: str, spec: dict[str, Any], words: str
) -> None:
    message = refusal(lambda: create(jobs, namespace, manifest(spec, "hetero")))
    assert "spec.roles.stage.groups" in message and words in message, message
    assert validate_job(spec) != []
