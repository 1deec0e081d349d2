"""The CRD's rules for the speed options trainer.compile and trainer.activationCheckpointing
on a real kube-apiserver: each bad spec of unit/operator/speed_cases.py is refused naming
the field validate_job names, with its reason; the strategies that support the options
(the torch.distributed.pipelining ones included) are accepted; both default to off."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from unit.operator.speed_cases import SPEED_BAD, SPEED_GOOD

from helpers.crd import assert_refused, dry_run_create, install_crd


@pytest.fixture(scope="module")
def jobs(cluster: Any) -> client.CustomObjectsApi:
    install_crd(cluster.api)
    return client.CustomObjectsApi(cluster.api)


@pytest.mark.parametrize(
    ("spec", "field", "words"), SPEED_BAD, ids=[f"{b[1]}-{b[2][:24]}" for b in SPEED_BAD]
)
def test_speed_option_is_refused_naming_the_field_and_why(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    assert_refused(jobs, namespace, spec, field, words)


@pytest.mark.parametrize("spec", SPEED_GOOD, ids=lambda s: s["strategy"]["type"])
def test_speed_options_are_accepted_where_they_apply(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]
) -> None:
    accepted = dry_run_create(jobs, namespace, spec)["spec"]["trainer"]
    assert accepted["activationCheckpointing"] is True


def test_speed_options_default_to_off(jobs: client.CustomObjectsApi, namespace: str) -> None:
    spec = {"strategy": {"type": "DataParallel"}, "roles": {"worker": {"replicas": 2}}}
    defaulted = dry_run_create(jobs, namespace, spec)["spec"]["trainer"]
    assert defaulted["compile"] is False and defaulted["activationCheckpointing"] is False
