"""validate_job for the speed options trainer.compile and trainer.activationCheckpointing:
accepted by the strategies that run the blocks as the trainer built them (the pipelines
of torch.distributed.pipelining included), refused with a reason by the others; each
refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.speed_cases import SPEED_BAD, SPEED_GOOD, job, pipeline

from dtjob_api.validation import validate_job


@pytest.mark.parametrize("good", SPEED_GOOD, ids=lambda s: s["strategy"]["type"])
def test_speed_options_are_accepted_where_they_apply(good: dict[str, Any]) -> None:
    assert validate_job(good, name="job-1") == []


@pytest.mark.parametrize(
    ("bad", "field", "words"), SPEED_BAD, ids=[f"{b[1]}-{b[2][:24]}" for b in SPEED_BAD]
)
def test_refusals_name_the_field_and_say_why(bad: dict[str, Any], field: str, words: str) -> None:
    errors = validate_job(bad, name="job-1")
    mine = [e for e in errors if e.field == field]
    assert mine, errors
    assert any(words in e.message for e in mine), errors


def test_the_options_off_are_never_refused() -> None:
    for spec, field, _ in SPEED_BAD:
        off = {**spec, "trainer": {**spec["trainer"], field.rsplit(".", 1)[1]: False}}
        assert field not in {e.field for e in validate_job(off, name="job-1")}


@pytest.mark.parametrize(
    ("field", "strategy", "reason"),
    [
        ("activationCheckpointing", "Hogwild", "a checkpointed block does not pickle"),
        ("compile", "Hogwild", "untested on a model shared with spawned processes"),
        ("activationCheckpointing", "PipeDream", "which a recomputation would not use"),
        ("compile", "PipeDream", "untested on their stashed weights"),
    ],
)
def test_each_option_gets_its_own_reason(field: str, strategy: str, reason: str) -> None:
    spec = (
        job("ParameterServer", {field: True}, parameterServer={"mode": "Hogwild"})
        if strategy == "Hogwild"
        else pipeline("PipeDream", {field: True})
    )
    (error,) = [e for e in validate_job(spec, name="job-1") if e.field.startswith("spec.trainer")]
    assert error.field == f"spec.trainer.{field}"
    assert reason in error.message
