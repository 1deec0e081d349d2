"""validate_job for the trainer's own model and data: a factory belongs to type Custom,
a path to the data read from files, kwargs are bounded, and a Custom model has no
tensor-parallel plan; each refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.custom_cases import CUSTOM, CUSTOM_BAD, CUSTOM_GOOD, job

from dtjob_api.validation import validate_job


@pytest.mark.parametrize("good", CUSTOM_GOOD)
def test_valid_custom_specs(good: dict[str, Any]) -> None:
    assert validate_job(good, name="job-1") == []


@pytest.mark.parametrize(("bad", "field", "words"), CUSTOM_BAD, ids=[b[1] for b in CUSTOM_BAD])
def test_invalid_custom_specs_name_the_field(bad: dict[str, Any], field: str, words: str) -> None:
    errors = validate_job(bad, name="job-1")
    assert field in [e.field for e in errors], errors
    assert any(words in e.message for e in errors if e.field == field), errors


@pytest.mark.parametrize(
    ("factory", "ok"),
    [("pkg.mod:build", True), ("mod:_f1", True), ("mod.build", False), ("m:f()", False),
     ("1m:f", False), ("m:f:g", False)],
)  # fmt: skip
def test_factory_is_module_colon_callable(factory: str, ok: bool) -> None:
    errors = validate_job(job(model={**CUSTOM, "factory": factory}), name="job-1")
    assert (errors == []) is ok, errors
    if not ok:
        assert [e.field for e in errors] == ["spec.trainer.model.factory"]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"blob": "x" * 20000}, "bytes of JSON"),
     ({"a": [[[[[[[[[1]]]]]]]]]}, "levels deep"),
     ({f"k{i}": i for i in range(65)}, "at most 64")],
)  # fmt: skip
def test_kwargs_are_bounded(kwargs: dict[str, Any], words: str) -> None:
    errors = validate_job(job(model={**CUSTOM, "kwargs": kwargs}), name="job-1")
    assert [e.field for e in errors] == ["spec.trainer.model.kwargs"], errors
    assert words in errors[0].message, errors


def test_kwargs_keep_any_json() -> None:
    kwargs = {"width": 16, "rate": 0.5, "names": ["a", "b"], "nested": {"on": True}, "n": None}
    assert validate_job(job(model={**CUSTOM, "kwargs": kwargs}), name="job-1") == []


def test_custom_command_still_needs_a_factory_for_custom() -> None:
    # The factory rules are about the spec's shape: they hold with a custom command too.
    custom = job(model={"type": "Custom"}, command=["python", "train.py"])
    assert [e.field for e in validate_job(custom, name="job-1")] == ["spec.trainer.model.factory"]
