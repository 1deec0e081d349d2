"""validate_job on the holes that once got through: crooked paths, never-runnable specs and
contradictions are refused naming the field; their well-formed neighbours pass."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.elastic_cases import ELASTIC_BAD, ELASTIC_GOOD
from unit.operator.guard_cases import GUARD_BAD, GUARD_GOOD

from dtjob_api.resource_names import is_whole_units
from dtjob_api.validation import validate_job

BAD = GUARD_BAD + ELASTIC_BAD
GOOD = GUARD_GOOD + ELASTIC_GOOD


@pytest.mark.parametrize("good", GOOD)
def test_well_formed_neighbours_pass(good: dict[str, Any]) -> None:
    assert validate_job(good, name="job-1") == []


@pytest.mark.parametrize(("bad", "field", "words"), BAD, ids=[b[1] for b in BAD])
def test_holes_are_refused_naming_the_field(bad: dict[str, Any], field: str, words: str) -> None:
    errors = validate_job(bad, name="job-1")
    assert field in [e.field for e in errors], errors
    assert any(words in e.message for e in errors if e.field == field), errors


@pytest.mark.parametrize(
    ("quantity", "whole"),
    [("4", True), ("1k", True), ("2Ki", True), ("+8", True),
     ("0.5", False), ("500m", False), ("1500m", False), ("1e-3", False), ("100n", False),
     ("2000m", False)],  # whole, but written as no one writes devices
)  # fmt: skip
def test_whole_units_as_kubernetes_counts_them(quantity: str, whole: bool) -> None:
    assert is_whole_units(quantity) is whole
    errors = validate_job({"strategy": {"type": "DataParallel"},
                           "roles": {"worker": {"replicas": 1, "extendedResources": {
                               "example.com/dev": quantity}}}})  # fmt: skip
    assert (errors == []) is whole, errors
    if not whole:
        assert "in whole units" in errors[0].message and quantity in errors[0].message
