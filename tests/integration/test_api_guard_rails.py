"""The CRD's rules for the holes that once got through, on a real kube-apiserver: each bad
spec of unit/operator/guard_cases.py (crooked paths, never-runnable specs, contradictions)
is refused at apply naming the field validate_job names, with its words; the well-formed
neighbours are accepted. The CEL quantity library parses extended resources here as the
pods' own validation would."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from unit.operator.elastic_cases import ELASTIC_BAD, ELASTIC_GOOD
from unit.operator.guard_cases import GUARD_BAD, GUARD_GOOD

from dtjob_api import GROUP, KIND, PLURAL, VERSION
from helpers.crd import assert_refused, install_crd

BAD = GUARD_BAD + ELASTIC_BAD
GOOD = GUARD_GOOD + ELASTIC_GOOD


@pytest.fixture(scope="module")
def jobs(cluster: Any) -> client.CustomObjectsApi:
    install_crd(cluster.api)
    return client.CustomObjectsApi(cluster.api)


@pytest.mark.parametrize(("spec", "field", "words"), BAD, ids=[b[1] for b in BAD])
def test_hole_is_refused_at_apply_naming_the_field(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    assert_refused(jobs, namespace, spec, field, words)


@pytest.mark.parametrize("spec", GOOD)
def test_well_formed_neighbour_is_accepted(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]
) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "job"},
            "spec": spec}  # fmt: skip
    jobs.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict"
    )
