"""validate_job: the operator's backstop for the schema and the CEL rules, with messages that
name the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError
from unit.operator.custom_cases import CUSTOM_BAD
from unit.operator.elastic_cases import ELASTIC_BAD
from unit.operator.guard_cases import GUARD_BAD
from unit.operator.pipeline_tp_cases import PIPELINE_TP_BAD
from unit.operator.speed_cases import SPEED_BAD
from unit.operator.stage_group_cases import STAGE_GROUP_BAD
from unit.operator.tp_cases import TP_BAD

from dtjob_api.facts import Facts
from dtjob_api.rules import IMMUTABLE_MESSAGE, RULES
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.validation import (
    FieldError,
    immutable_changes,
    validate_job,
    validate_name,
)


def spec(strategy: str, **roles: dict[str, Any]) -> dict[str, Any]:
    """A minimal spec: the strategy type plus roles (each a RoleSpec dict)."""
    return {"strategy": {"type": strategy}, "roles": roles}


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `base` with the dotted `path` set (intermediate dicts created)."""
    out = copy.deepcopy(base)
    node = out
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return out


def fields(errors: list[FieldError]) -> list[str]:
    return [e.field for e in errors]


GOOD = [
    spec("DataParallel", worker={"replicas": 2, "gpus": 4}),
    spec("ParameterServer", worker={"replicas": 2}),  # Sync: ps optional
    with_(spec("ParameterServer", worker={"replicas": 2}, ps={}), "strategy.parameterServer", {}),
    with_(spec("ParameterServer", worker={}), "strategy.parameterServer", {"mode": "Hogwild"}),
    spec("ModelParallel", stage={"replicas": 2}),
    spec("ModelParallel", stage={"replicas": 1, "gpus": 2}),
    with_(
        spec("Pipeline", stage={"replicas": 4}),
        "strategy.pipeline",
        {"schedule": "1F1B", "microbatches": 4},
    ),
    with_(spec("Hybrid", stage={"replicas": 4}), "strategy.hybrid", {"dataParallel": 2}),
    spec("FSDP", worker={"replicas": 2, "gpus": 8}),
    spec("CPUOffload", worker={"replicas": 1, "cpu": 4, "memory": "8Gi"}),
    spec("Auto", worker={"replicas": 1, "gpus": 1}),
]


@pytest.mark.parametrize("good", GOOD, ids=lambda s: s["strategy"]["type"])
def test_valid_specs_have_no_errors(good: dict[str, Any]) -> None:
    assert validate_job(good, name="job-1") == []


# (spec, field, words the message must contain)
BAD = [
    (spec("DataParallel"), "spec.roles.worker", "required for strategy DataParallel"),
    # ParameterServer mode EASGDRoundRobin: one master holds the centre, >= 2 workers.
    (
        with_(
            spec("ParameterServer", worker={"replicas": 2}),
            "strategy.parameterServer.mode",
            "EASGDRoundRobin",
        ),
        "spec.roles.ps",
        "required for strategy ParameterServer in mode EASGDRoundRobin",
    ),
    (
        with_(
            spec("ParameterServer", worker={"replicas": 2}, ps={"procsPerPod": 2}),
            "strategy.parameterServer.mode",
            "EASGDRoundRobin",
        ),
        "spec.roles.ps",
        "exactly 1 ps process (replicas x procsPerPod) (got 2)",
    ),
    (
        with_(
            spec("ParameterServer", worker={}, ps={}),
            "strategy.parameterServer.mode",
            "EASGDRoundRobin",
        ),
        "spec.roles.worker",
        "at least 2 worker processes",
    ),
    # A tf.distribute alias is its target, except that the PS alias has no modes.
    (spec("MirroredStrategy", worker={}, ps={}), "spec.roles.ps", "not MirroredStrategy"),
    (
        with_(spec("ParameterServerStrategy", worker={}, ps={}), "strategy.parameterServer", {}),
        "spec.strategy.parameterServer",
        "not allowed with strategy ParameterServerStrategy",
    ),
    (spec("FSDP", worker={}, ps={}), "spec.roles.ps", "only allowed with strategy ParameterServer"),
    (spec("Auto", worker={}, stage={}), "spec.roles.stage", "not allowed with strategy Auto"),
    (spec("Pipeline"), "spec.roles.stage", "required for strategy Pipeline"),
    (spec("Hybrid", stage={"replicas": 4}, worker={}), "spec.roles.worker", "not allowed"),
    (spec("ModelParallel", stage={}, ps={}), "spec.roles.ps", "only allowed"),
    (
        with_(spec("ParameterServer", worker={}), "strategy.parameterServer.mode", "Async"),
        "spec.roles.ps",
        "required for strategy ParameterServer in mode Async",
    ),
    (
        with_(
            spec("ParameterServer", worker={"replicas": 2}),
            "strategy.parameterServer.mode",
            "Hogwild",
        ),
        "spec.roles.ps",
        "mode Hogwild",
    ),
    (
        with_(spec("DataParallel", worker={}), "strategy.parameterServer", {}),
        "spec.strategy.parameterServer",
        "only allowed with strategy ParameterServer, not DataParallel",
    ),
    (
        with_(spec("DataParallel", worker={}), "strategy.pipeline", {}),
        "spec.strategy.pipeline",
        "only allowed with strategy Pipeline or Hybrid",
    ),
    (
        with_(spec("Pipeline", stage={"replicas": 2}), "strategy.hybrid", {}),
        "spec.strategy.hybrid",
        "only allowed with strategy Hybrid",
    ),
    (
        with_(
            spec("Pipeline", stage={"replicas": 4}),
            "strategy.pipeline",
            {"schedule": "PipeDream2BW", "microbatches": 2},
        ),
        "spec.strategy.pipeline.microbatches",
        "schedule PipeDream2BW needs at least as many micro-batches as pipeline stages "
        "(the stage processes): two weight buffers suffice only when a step fills the "
        "pipeline (2 micro-batches, 4 pipeline ranks)",
    ),
    (
        with_(
            with_(spec("Hybrid", stage={"replicas": 4}), "strategy.hybrid", {"dataParallel": 2}),
            "strategy.pipeline",
            {"schedule": "PipeDream", "microbatches": 4},
        ),
        "spec.strategy.pipeline.schedule",
        "schedule PipeDream runs with strategy Pipeline only",
    ),
    (
        with_(
            spec("Pipeline", stage={"replicas": 4}),
            "strategy.pipeline",
            {"schedule": "1F1B", "microbatches": 2},
        ),
        "spec.strategy.pipeline.microbatches",
        "schedule 1F1B needs at least as many micro-batches as pipeline ranks",
    ),
    (
        with_(
            spec("Pipeline", stage={"replicas": 2, "procsPerPod": 2}),
            "strategy.pipeline",
            {"schedule": "Interleaved1F1B", "microbatches": 2},
        ),
        "spec.strategy.pipeline.microbatches",
        "(2 micro-batches, 4 pipeline ranks)",
    ),
    (
        with_(
            spec("Pipeline", stage={"replicas": 4}),
            "strategy.pipeline",
            {"schedule": "Interleaved1F1B", "microbatches": 9},
        ),
        "spec.strategy.pipeline.microbatches",
        "multiple of the rounds",
    ),
    (
        with_(
            with_(spec("Hybrid", stage={"replicas": 8}), "strategy.hybrid", {"dataParallel": 2}),
            "strategy.pipeline",
            {"schedule": "1F1B", "microbatches": 2},
        ),
        "spec.strategy.pipeline.microbatches",
        "(2 micro-batches, 4 pipeline ranks)",
    ),
    (
        with_(
            with_(spec("Hybrid", stage={"replicas": 8}), "trainer.batchSize", 72),
            "strategy.pipeline",
            {"schedule": "Interleaved1F1B", "microbatches": 9},
        ),
        "spec.strategy.pipeline.microbatches",
        "(9 micro-batches, 4 pipeline ranks)",
    ),
    (
        spec("ModelParallel", stage={"replicas": 1}),
        "spec.roles.stage",
        "at least 2 stage processes",
    ),
    (
        with_(spec("Hybrid", stage={"replicas": 3}), "strategy.hybrid", {"dataParallel": 2}),
        "spec.strategy.hybrid.dataParallel",
        "must divide the stage processes",
    ),
    (
        with_(spec("Hybrid", stage={"replicas": 2}), "strategy.hybrid", {"dataParallel": 2}),
        "spec.roles.stage",
        "pipeline degree",
    ),
    (
        with_(spec("Pipeline", stage={"replicas": 2}), "trainer.batchSize", 66),
        "spec.trainer.batchSize",
        "divisible by strategy.pipeline.microbatches",
    ),
    (
        with_(spec("Hybrid", stage={"replicas": 4}), "trainer.batchSize", 12),
        "spec.trainer.batchSize",
        "(12 is not a multiple of 2 x 4)",
    ),
    (
        with_(spec("DataParallel", worker={"replicas": 3}), "trainer.batchSize", 2),
        "spec.trainer.batchSize",
        "(2 is less than 3)",
    ),
    (
        with_(spec("ParameterServer", worker={"replicas": 3}), "trainer.batchSize", 64),
        "spec.trainer.batchSize",
        "every global batch is split evenly over them",
    ),
    (
        with_(
            with_(spec("ParameterServer", worker={"replicas": 3}, ps={}), "trainer.batchSize", 64),
            "strategy.parameterServer.mode",
            "Async",
        ),
        "spec.trainer.batchSize",
        "(64 is not a multiple of 3)",
    ),
    (
        with_(
            with_(spec("ParameterServer", worker={"replicas": 1}), "trainer.batchSize", 30),
            "strategy.parameterServer",
            {"mode": "Hogwild", "hogwildProcesses": 4},
        ),
        "spec.trainer.batchSize",
        "(30 is not a multiple of 4)",
    ),
    (
        with_(
            spec("ParameterServer", worker={"procsPerPod": 2}),
            "strategy.parameterServer.mode",
            "Hogwild",
        ),
        "spec.roles.ps",
        "Hogwild with more than one worker process",
    ),
    (
        spec("Pipeline", stage={"replicas": 5}),
        "spec.roles.stage",
        "use fewer stage processes (5 stages, 4 blocks)",
    ),
    (
        with_(
            spec("Pipeline", stage={"replicas": 4}),
            "strategy.pipeline",
            {"schedule": "Interleaved1F1B", "microbatches": 4, "stagesPerRank": 2},
        ),
        "spec.roles.stage",
        "(8 stages, 4 blocks)",
    ),
    (
        with_(spec("DataParallel", worker={}), "trainer.model.type", "GPT"),
        "spec.trainer.dataset.type",
        "GPT trains on SyntheticTokens",
    ),
    (
        with_(
            with_(
                spec("DataParallel", worker={}),
                "trainer.model",
                {"type": "GPT", "dModel": 100, "heads": 8},
            ),
            "trainer.dataset.type",
            "SyntheticTokens",
        ),
        "spec.trainer.model.dModel",
        "(100 is not a multiple of 8)",
    ),
    (
        with_(
            spec("DataParallel", worker={}),
            "runPolicy",
            {"backoffSeconds": 60, "maxBackoffSeconds": 30},
        ),
        "spec.runPolicy.maxBackoffSeconds",
        "at least runPolicy.backoffSeconds",
    ),
]


@pytest.mark.parametrize(
    ("bad", "field", "words"), BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)]
)
def test_cross_field_rule_violations_name_the_field(
    bad: dict[str, Any], field: str, words: str
) -> None:
    errors = validate_job(bad)
    assert field in fields(errors), errors
    assert any(words in e.message for e in errors if e.field == field), errors


def _parsed(spec: dict[str, Any]) -> DistributedTrainingJobSpec | None:
    try:
        return DistributedTrainingJobSpec.model_validate(spec)
    except ValidationError:
        return None


def test_every_rule_is_exercised_by_a_bad_case() -> None:
    cases = BAD + TP_BAD + STAGE_GROUP_BAD + PIPELINE_TP_BAD + CUSTOM_BAD + SPEED_BAD + GUARD_BAD
    cases += ELASTIC_BAD
    # Cases refused by the schema itself (pydantic) never reach the cross-field rules.
    parsed = [s for s in (_parsed(bad) for bad, _, _ in cases) if s is not None]
    facts = [Facts.of(spec) for spec in parsed]
    for rule in RULES:
        assert any(not rule.check(f) for f in facts), f"no case breaks {rule.field}: {rule.message}"


def test_custom_commands_skip_the_bundled_trainers_rules() -> None:
    custom = with_(spec("Pipeline", stage={"replicas": 8}), "trainer.command", ["run.sh"])
    custom = with_(custom, "trainer.model.type", "GPT")
    assert validate_job(custom) == []


@pytest.mark.parametrize(
    "bundled_only",
    [
        # 96 worker processes: more than the default batchSize 64.
        spec("DataParallel", worker={"replicas": 12, "gpus": 8}),
        with_(
            spec("ParameterServer", worker={"replicas": 3}, ps={}),
            "strategy.parameterServer.mode",
            "Hogwild",
        ),
        with_(spec("Pipeline", stage={"replicas": 2}), "trainer.batchSize", 66),
        with_(spec("Hybrid", stage={"replicas": 4}), "trainer.batchSize", 12),
        # 1F1B with fewer micro-batches than ranks: a limit of torch's schedule.
        with_(
            with_(spec("Pipeline", stage={"replicas": 8}), "strategy.pipeline.schedule", "1F1B"),
            "strategy.pipeline.microbatches",
            2,
        ),
    ],
)
def test_bundled_trainer_rules_refuse_only_the_bundled_trainer(bundled_only: dict) -> None:
    assert validate_job(bundled_only) != []
    assert validate_job(with_(bundled_only, "trainer.command", ["torchrun", "train.py"])) == []
    # A custom image alone still runs the bundled trainer (python -m dtjob_trainer run).
    assert validate_job(with_(bundled_only, "trainer.image", "example.com/mine:1")) != []


def test_custom_commands_keep_the_gangs_shape_rules() -> None:
    custom = with_(spec("Pipeline", worker={}), "trainer.command", ["run.sh"])
    assert "spec.roles.stage" in fields(validate_job(custom))
    hybrid = with_(spec("Hybrid", stage={"replicas": 3}), "trainer.command", ["run.sh"])
    assert "spec.strategy.hybrid.dataParallel" in fields(validate_job(hybrid))


def test_hogwild_with_one_worker_pod_needs_no_ps() -> None:
    one = with_(
        spec("ParameterServer", worker={"replicas": 1}), "strategy.parameterServer.mode", "Hogwild"
    )
    assert validate_job(one) == []


def test_processes_count_gpus_when_procs_per_pod_is_unset() -> None:
    # 2 pods x 4 GPUs = 8 worker processes: a batch of 8 has one sample each, 6 has not.
    base = spec("DataParallel", worker={"replicas": 2, "gpus": 4})
    assert validate_job(with_(base, "trainer.batchSize", 8)) == []
    assert fields(validate_job(with_(base, "trainer.batchSize", 6))) == ["spec.trainer.batchSize"]
    explicit = with_(base, "roles.worker.procsPerPod", 2)  # 4 processes now
    assert validate_job(with_(explicit, "trainer.batchSize", 6)) == []
    # An uneven split is the data-parallel family's only: 60 over 8 Async workers is not.
    ps = spec("ParameterServer", worker={"replicas": 2, "gpus": 4}, ps={})
    ps = with_(ps, "strategy.parameterServer.mode", "Async")
    assert fields(validate_job(with_(ps, "trainer.batchSize", 60))) == ["spec.trainer.batchSize"]


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        (spec("Magic", worker={}), "spec.strategy.type", "Input should be 'DataParallel'"),
        (spec("DataParallel", worker={"replicas": 0}), "spec.roles.worker.replicas", "(got 0)"),
        (
            spec("DataParallel", worker={"replicas": -1}),
            "spec.roles.worker.replicas",
            "greater than",
        ),
        (spec("DataParallel", worker={"gpus": 0.5}), "spec.roles.worker.gpus", "fractional part"),
        (
            spec("DataParallel", worker={"cpu": "1.2.3"}),
            "spec.roles.worker.cpu",
            "Kubernetes quantity",
        ),
        (spec("DataParallel", worker={"memory": "16GB"}), "spec.roles.worker.memory", "16Gi"),
        (spec("DataParallel", worker={"gpu": 1}), "spec.roles.worker.gpu", "unknown field"),
        ({"roles": {"worker": {}}}, "spec.strategy", "required"),
        (
            spec("DataParallel", worker={"template": {"tolerations": ["x"]}}),
            "spec.roles.worker.template.tolerations[0]",
            "valid dictionary",
        ),
        (
            with_(spec("DataParallel", worker={}), "trainer.model.hiddenSizes", [64, 0]),
            "spec.trainer.model.hiddenSizes[1]",
            "greater than or equal to 1",
        ),
    ],
)
def test_schema_errors_use_the_camel_case_path(bad: dict[str, Any], field: str, words: str) -> None:
    errors = validate_job(bad)
    assert field in fields(errors), errors
    message = next(e.message for e in errors if e.field == field)
    assert words in message
    assert str(next(e for e in errors if e.field == field)).startswith(f"{field}: ")


def test_quantities_may_be_yaml_integers() -> None:
    assert validate_job(spec("DataParallel", worker={"cpu": 4, "memory": "8Gi"})) == []


def test_missing_spec() -> None:
    assert fields(validate_job(None)) == ["spec"]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("mnist-ddp", True),
        ("a" * 45, True),
        ("a" * 46, False),
        ("1job", False),  # a Service name must start with a letter
        ("Job", False),
        ("job-", False),
        ("job.v1", False),
    ],
)
def test_names_must_fit_pod_hostnames(name: str, ok: bool) -> None:
    assert (validate_name(name) == []) is ok
    assert (validate_job(spec("DataParallel", worker={}), name=name) == []) is ok


def test_immutable_changes_allow_suspend_ttl_and_deadline() -> None:
    old = spec("DataParallel", worker={"replicas": 2})
    new = with_(old, "suspend", True)
    new = with_(new, "runPolicy.ttlSecondsAfterFinished", 60)
    new = with_(new, "runPolicy.activeDeadlineSeconds", 3600)
    assert immutable_changes(old, new) == []


def test_immutable_changes_name_each_changed_field() -> None:
    old = spec("DataParallel", worker={"replicas": 2})
    new = with_(old, "roles.worker.replicas", 4)
    new = with_(new, "runPolicy.backoffLimit", 9)
    new = with_(new, "priorityClassName", "high")
    assert immutable_changes(old, new) == [
        FieldError("spec.priorityClassName", IMMUTABLE_MESSAGE),
        FieldError("spec.roles", IMMUTABLE_MESSAGE),
        FieldError("spec.runPolicy.backoffLimit", IMMUTABLE_MESSAGE),
    ]


def test_writing_a_default_explicitly_is_no_change() -> None:
    old = spec("DataParallel", worker={})
    assert immutable_changes(old, with_(old, "trainer.batchSize", 64)) == []


def test_easgd_without_ps_is_its_synchronous_form() -> None:
    job = with_(
        spec("ParameterServer", worker={"replicas": 2}), "strategy.parameterServer.mode", "EASGD"
    )
    assert validate_job(job) == []
