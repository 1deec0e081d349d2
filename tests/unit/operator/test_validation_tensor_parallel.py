"""validate_job for strategy TensorParallel: the worker processes must split into tp
groups, the batch over the data-parallel replicas, and the model over the tp size (GPT by
heads, MLP by widths); each refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.tp_cases import GPT, TOKENS, TP_BAD, tp

from dtjob_api.validation import validate_job


@pytest.mark.parametrize(
    "good",
    [
        tp(2),
        tp(4, batchSize=2),  # dp = 2: the batch splits over 2 replicas, not 4 processes
        tp(4, size=4, model=GPT, dataset=TOKENS),
        tp(2, size=None, model={"type": "MLP", "hiddenSizes": [32, 64]}),
        {"strategy": {"type": "TensorParallel"}, "roles": {"worker": {"gpus": 2}}},
    ],
)
def test_valid_tensor_parallel_specs(good: dict[str, Any]) -> None:
    assert validate_job(good, name="job-1") == []


@pytest.mark.parametrize(("bad", "field", "words"), TP_BAD)
def test_invalid_tensor_parallel_specs_name_the_field(
    bad: dict[str, Any], field: str, words: str
) -> None:
    errors = validate_job(bad, name="job-1")
    assert field in [e.field for e in errors], errors
    assert any(words in e.message for e in errors if e.field == field), errors


def test_custom_command_is_spared_the_model_rules() -> None:
    custom = tp(2, model={"type": "CNN"}, command=["python", "train.py"], image="my/image:1")
    assert validate_job(custom, name="job-1") == []


def test_operator_adds_the_numbers_behind_a_refusal() -> None:
    errors = validate_job(tp(6, size=4), name="job-1")
    assert [e.message for e in errors if e.field == "spec.strategy.tensorParallel.size"] == [
        "must divide the worker processes (replicas x procsPerPod) evenly: the data-parallel "
        "degree is their quotient (6 worker processes, size 4)"
    ]
