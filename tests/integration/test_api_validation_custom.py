"""The CRD's rules for the trainer's own model and data on a real kube-apiserver: each bad
spec of unit/operator/custom_cases.py is refused naming the field validate_job names, with
its words; good ones are stored with a factory's kwargs kept as written."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from unit.operator.custom_cases import CUSTOM, CUSTOM_BAD, CUSTOM_GOOD, job

from dtjob_api import GROUP, KIND, PLURAL, VERSION
from helpers.crd import assert_refused, install_crd


@pytest.fixture(scope="module")
def jobs(cluster: Any) -> client.CustomObjectsApi:
    install_crd(cluster.api)
    return client.CustomObjectsApi(cluster.api)


def body(spec: dict[str, Any], name: str = "job") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def create(jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]) -> Any:
    return jobs.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body(spec), dry_run="All", field_validation="Strict"
    )


@pytest.mark.parametrize(("spec", "field", "words"), CUSTOM_BAD, ids=[b[1] for b in CUSTOM_BAD])
def test_bad_custom_job_is_refused_naming_the_field(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    assert_refused(jobs, namespace, spec, field, words)


@pytest.mark.parametrize("spec", CUSTOM_GOOD)
def test_good_custom_job_is_accepted(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]
) -> None:
    create(jobs, namespace, spec)


def test_kwargs_are_stored_as_written_and_bounded(
    jobs: client.CustomObjectsApi, namespace: str
) -> None:
    kwargs = {"width": 16, "rate": 0.5, "names": ["a", "b"], "nested": {"on": True}}
    stored = create(jobs, namespace, job(model={**CUSTOM, "kwargs": kwargs}))
    assert stored["spec"]["trainer"]["model"]["kwargs"] == kwargs
    too_many = {f"k{i}": i for i in range(65)}
    with pytest.raises(client.ApiException) as err:
        create(jobs, namespace, job(model={**CUSTOM, "kwargs": too_many}))
    assert "spec.trainer.model.kwargs" in err.value.body, err.value.body


def test_an_existing_custom_job_can_be_updated(
    jobs: client.CustomObjectsApi, namespace: str
) -> None:
    # The immutability rules compare trainer (kwargs included) with its old value: the
    # API server must be able to evaluate them within its cost budget.
    spec = job(model={**CUSTOM, "kwargs": {"nested": {"list": [1, 2, {"k": "v"}]}}})
    jobs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body(spec, "keep"))
    patched = jobs.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "keep", {"spec": {"suspend": True}}
    )
    assert patched["spec"]["suspend"] is True
    with pytest.raises(client.ApiException) as err:
        jobs.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "keep",
            {"spec": {"trainer": {"model": {"kwargs": {"width": 8}}}}},
        )  # fmt: skip
    assert "immutable" in err.value.body, err.value.body
