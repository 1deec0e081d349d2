"""The CRD's CEL rules for Pipeline and Hybrid with strategy.tensorParallel (3-D
parallelism) on a real kube-apiserver: the good specs of unit/operator/pipeline_tp_cases.py
are accepted, and each bad one is refused naming the field validate_job names, with its
words."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from unit.operator.pipeline_tp_cases import PIPELINE_TP_BAD, PIPELINE_TP_GOOD

from dtjob_api import GROUP, KIND, PLURAL, VERSION
from dtjob_api.validation import validate_job
from helpers.crd import install_crd


@pytest.fixture(scope="module")
def jobs(cluster: Any) -> client.CustomObjectsApi:
    install_crd(cluster.api)
    return client.CustomObjectsApi(cluster.api)


def dry_run_create(jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "job"}}
    jobs.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, {**body, "spec": spec},
        dry_run="All", field_validation="Strict",
    )  # fmt: skip


@pytest.mark.parametrize("spec", PIPELINE_TP_GOOD)
def test_good_3d_job_is_accepted(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]
) -> None:
    dry_run_create(jobs, namespace, spec)


@pytest.mark.parametrize(
    ("spec", "field", "words"), PIPELINE_TP_BAD, ids=[b[2][:30] for b in PIPELINE_TP_BAD]
)
def test_bad_3d_job_is_refused_naming_the_field(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(client.ApiException) as err:
        dry_run_create(jobs, namespace, spec)
    assert err.value.status in (400, 422), err.value.body
    message = err.value.body
    assert field in message, message
    assert words in message, message
    assert field in {e.field for e in validate_job(spec, name="job")}
