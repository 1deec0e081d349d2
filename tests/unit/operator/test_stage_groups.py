"""Heterogeneous pipelines in the operator: roles.stage.groups become stage pods with
their own resources, in pipeline (= rank) order; sizes that do not fit are refused naming
the field; a job with CPU groups gets gloo; admission counts each pod's own resources."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.stage_group_cases import CPU, GOOD, GPU, STAGE_GROUP_BAD, hetero

from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.validation import validate_job
from dtjob_operator.admission.snapshot import gang_pods
from dtjob_operator.builders import Job, build_pod
from dtjob_operator.envcontract import resolve_backend
from dtjob_operator.settings import OperatorSettings

SETTINGS = OperatorSettings()


def job(spec: dict[str, Any]) -> Job:
    return Job.from_object(
        {"metadata": {"name": "het", "namespace": "ns", "uid": "u1"}, "spec": spec}
    )


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}


def test_each_group_gets_its_own_resources_in_pipeline_order() -> None:
    j = job(GOOD)
    pods = [build_pod(j, "stage", i, 0, SETTINGS) for i in range(3)]
    limits = [p["spec"]["containers"][0]["resources"]["limits"] for p in pods]
    assert limits[0] == {"cpu": "8", "memory": "64Gi"}
    assert limits[1] == limits[2] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    # Stage ranks follow the groups: the CPU group's pod is stage 0 and rank 0.
    envs = [env_of(p) for p in pods]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert [e["DTJ_STAGE_INDEX"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"} and {e["DTJ_PP_SIZE"] for e in envs} == {"3"}
    # NCCL cannot reach the CPU rank: auto resolves to gloo on every pod.
    assert {e["DTJ_BACKEND"] for e in envs} == {"gloo"}


def test_group_defaults_come_from_the_role() -> None:
    spec = hetero({"name": "a", "replicas": 1}, {"name": "b", "replicas": 1, "memory": "2Gi"})
    spec["roles"]["stage"].update(cpu="2", memory="1Gi")
    pods = [build_pod(job(spec), "stage", i, 0, SETTINGS) for i in range(2)]
    limits = [p["spec"]["containers"][0]["resources"]["limits"] for p in pods]
    assert limits == [{"cpu": "2", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"}]


def test_backend_auto_is_nccl_only_when_every_group_has_a_gpu() -> None:
    assert resolve_backend(DistributedTrainingJobSpec.model_validate(GOOD)) == "gloo"
    all_gpu = hetero({**GPU, "name": "a"}, {**GPU, "name": "b"})
    assert resolve_backend(DistributedTrainingJobSpec.model_validate(all_gpu)) == "nccl"


def test_admission_counts_each_pods_own_resources() -> None:
    obj = {"metadata": {"name": "het", "namespace": "ns", "uid": "u1"}, "spec": GOOD}
    gang = gang_pods(obj, SETTINGS)
    assert gang is not None
    gpus = [p.demand.requests.get("nvidia.com/gpu", 0) for p in gang]
    assert sorted(gpus) == [0, 1, 1]


def test_a_good_hetero_spec_is_valid() -> None:
    assert validate_job(GOOD) == []
    blocks = hetero({**CPU, "blocks": 2}, {**GPU, "blocks": 1})
    assert validate_job(blocks) == []


@pytest.mark.parametrize(
    ("bad", "field", "words"), STAGE_GROUP_BAD, ids=[b[2][:30] for b in STAGE_GROUP_BAD]
)
def test_cross_field_violations_name_the_field(bad: dict[str, Any], field: str, words: str) -> None:
    errors = validate_job(bad)
    assert any(e.field == field and words in e.message for e in errors), errors


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda s: s["roles"]["stage"].update(replicas=4), "must add up to roles.stage.replicas"),
        (lambda s: s["roles"]["stage"].update(gpus=1), "leave roles.stage.gpus 0"),
        (lambda s: s["roles"]["stage"].update(procsPerPod=2), "procsPerPod unset or 1"),
        (lambda s: s["roles"]["stage"]["groups"][0].update(blocks=1), "on every group or on none"),
        (lambda s: s["roles"]["stage"]["groups"][1].update(name="cpu"), "names must be unique"),
        (lambda s: s["roles"]["stage"]["groups"][1].update(gpus=2), "less than or equal to 1"),
        (lambda s: s["roles"]["stage"]["groups"][0].update(replicas=0), "greater than or equal"),
    ],
)
def test_bad_group_sizes_are_refused_naming_the_field(change: Any, words: str) -> None:
    spec = hetero(CPU, GPU)
    change(spec)
    errors = validate_job(spec)
    assert any(e.field.startswith("spec.roles.stage") and words in e.message for e in errors), (
        errors
    )
    assert any("groups" in e.field or "groups" in e.message for e in errors), errors
