"""validate_job for Pipeline and Hybrid with strategy.tensorParallel (3-D parallelism):
the stage processes must split into (pp, dp, tp), the pipeline degree counts pipeline
ranks (stage processes / (dp x tp)), the model must split over the tp size, and what the
trainer does not run with tp stages (PipeDream schedules, stage groups, ModelParallel) is
refused; each refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.pipeline_tp_cases import PIPELINE_TP_BAD, PIPELINE_TP_GOOD, pp_tp

from dtjob_api.facts import Facts
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.validation import validate_job


@pytest.mark.parametrize("good", PIPELINE_TP_GOOD)
def test_valid_3d_specs(good: dict[str, Any]) -> None:
    assert validate_job(good, name="job-1") == []


@pytest.mark.parametrize(
    ("bad", "field", "words"), PIPELINE_TP_BAD, ids=[b[2][:30] for b in PIPELINE_TP_BAD]
)
def test_invalid_3d_specs_name_the_field(bad: dict[str, Any], field: str, words: str) -> None:
    errors = validate_job(bad, name="job-1")
    assert field in [e.field for e in errors], errors
    assert any(words in e.message for e in errors if e.field == field), errors


def test_pipeline_degree_counts_pipeline_ranks() -> None:
    facts = Facts.of(DistributedTrainingJobSpec.model_validate(pp_tp(8, dp=2)))
    assert (facts.stageTensorParallel, facts.stageWidth, facts.pipelineDegree) == (2, 4, 2)
    # Without strategy.tensorParallel a stage is not split (TensorParallel's default size
    # of 2 does not apply).
    plain = pp_tp(8, dp=2)
    del plain["strategy"]["tensorParallel"]
    facts = Facts.of(DistributedTrainingJobSpec.model_validate(plain))
    assert (facts.stageTensorParallel, facts.pipelineDegree) == (1, 4)


def test_operator_adds_the_numbers_behind_a_refusal() -> None:
    errors = validate_job(pp_tp(8, size=3, dp=2), name="job-1")
    assert [e.message for e in errors if e.field == "spec.strategy.tensorParallel.size"] == [
        "must divide the stage processes (replicas x procsPerPod; for Hybrid, divided by "
        "strategy.hybrid.dataParallel) evenly: the pipeline degree is their quotient "
        "(8 stage processes, width 6)"
    ]


def test_custom_command_is_spared_the_trainer_rules() -> None:
    custom = pp_tp(4, schedule="PipeDream", model={"type": "CNN"}, command=["python", "t.py"])
    assert validate_job(custom, name="job-1") == []
