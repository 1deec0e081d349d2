"""The CRD's CEL rules for Pipeline and Hybrid with strategy.tensorParallel (3-D
parallelism) on a real kube-apiserver: the good specs of unit/operator/pipeline_tp_cases.py
are accepted, and each bad one is refused naming the field validate_job names, with its
words."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from unit.operator.pipeline_tp_cases import PIPELINE_TP_BAD, PIPELINE_TP_GOOD

from helpers.crd import assert_refused, dry_run_create, install_crd


@pytest.fixture(scope="module")
def jobs(cluster: Any) -> client.CustomObjectsApi:
    install_crd(cluster.api)
    return client.CustomObjectsApi(cluster.api)


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
    assert_refused(jobs, namespace, spec, field, words)
