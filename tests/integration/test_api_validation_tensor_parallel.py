"""The CRD's CEL rules for strategy TensorParallel on a real kube-apiserver: each bad spec
of unit/operator/tp_cases.py is refused naming the field validate_job names, with its
words."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from unit.operator.tp_cases import TP_BAD

from dtjob_api import GROUP, KIND, PLURAL, VERSION
from dtjob_api.validation import validate_job
from helpers.crd import install_crd


@pytest.fixture(scope="module")
def jobs(cluster: Any) -> client.CustomObjectsApi:
    install_crd(cluster.api)
    return client.CustomObjectsApi(cluster.api)


@pytest.mark.parametrize(("spec", "field", "words"), TP_BAD, ids=[b[1] for b in TP_BAD])
def test_bad_tensor_parallel_job_is_refused_naming_the_field(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": "job"},
        "spec": spec,
    }
    with pytest.raises(client.ApiException) as err:
        jobs.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict"
        )
    assert err.value.status in (400, 422), err.value.body
    message = err.value.body
    assert field in message, message
    assert words in message, message
    assert field in {e.field for e in validate_job(spec, name="job")}
