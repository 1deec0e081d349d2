"""Manifests in (validated by dtjob_api before anything is sent) and jobs out (lenient
about fields a newer operator may add)."""

from __future__ import annotations

from pathlib import Path

import pytest
from unit.client.builders import JobJson

from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_client.errors import DtjobError, InvalidJob
from dtjob_client.jobs import Job, gpus_of, load_manifest

SPEC = {"strategy": {"type": "DataParallel"}, "roles": {"worker": {"replicas": 2, "gpus": 1}}}


def test_a_spec_model_needs_a_name_and_becomes_a_full_manifest() -> None:
    spec = DistributedTrainingJobSpec.model_validate(SPEC)
    with pytest.raises(InvalidJob, match=r"metadata\.name"):
        load_manifest(spec)
    manifest = load_manifest(spec, "j")
    assert list(manifest)[:4] == ["apiVersion", "kind", "metadata", "spec"]
    assert manifest["metadata"] == {"name": "j"}
    assert manifest["spec"]["roles"]["worker"]["replicas"] == 2


def test_cross_field_rules_refuse_before_sending() -> None:
    bad = {"metadata": {"name": "j"}, "spec": {**SPEC, "roles": {"ps": {"replicas": 1}}}}
    with pytest.raises(InvalidJob) as err:
        load_manifest(bad)
    assert any(e.field.startswith("spec.roles") for e in err.value.errors)
    with pytest.raises(InvalidJob, match=r"metadata\.name: must be a DNS-1035 label"):
        load_manifest({"metadata": {"name": "Bad_Name"}, "spec": SPEC})


def test_yaml_files(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: dtjob.io/v1alpha1\nkind: DistributedTrainingJob\n"
                    "metadata: {name: y}\nspec:\n  strategy: {type: FSDP}\n"
                    "  roles: {worker: {replicas: 2}}\n")  # fmt: skip
    assert load_manifest(path)["metadata"]["name"] == "y"
    path.write_text("kind: Pod\napiVersion: v1\nmetadata: {name: p}\n")
    with pytest.raises(InvalidJob, match="expected DistributedTrainingJob"):
        load_manifest(str(path))
    with pytest.raises(DtjobError, match="cannot read"):
        load_manifest(tmp_path / "missing.yaml")


def test_unknown_status_fields_from_a_newer_operator_are_dropped() -> None:
    obj = JobJson("j").role("worker", 2, gpus=1).status(phase="Running", brandNew={"x": 1}).build()
    obj["status"]["progress"] = {"step": 5, "futureField": 1}
    job = Job.from_api(obj)
    assert job.status.phase == "Running" and job.status.progress is not None
    assert job.status.progress.step == 5


def test_gpus_count_every_role_and_stage_group() -> None:
    spec = DistributedTrainingJobSpec.model_validate(
        {"strategy": {"type": "Pipeline"}, "roles": {"stage": {"replicas": 3, "groups": [
            {"name": "cpu", "replicas": 1}, {"name": "gpu", "replicas": 2, "gpus": 1}]}}}
    )  # fmt: skip
    assert gpus_of(spec) == 2
    ps = DistributedTrainingJobSpec.model_validate(
        {"strategy": {"type": "ParameterServer"},
         "roles": {"worker": {"replicas": 3, "gpus": 2}, "ps": {"replicas": 2}}}
    )  # fmt: skip
    assert gpus_of(ps) == 6
