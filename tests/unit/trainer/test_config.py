"""The trainer's job config: dtjob_api's model and rules, read from the spec the operator
writes or a manifest `launch` reads; defaults, refused fields, messages that name the field,
and what the trainer derives (process grid)."""

from __future__ import annotations

from typing import Any

import pytest
from unit.trainer.harness import a_spec

from dtjob_api.spec import StrategyType, TrainerSpec
from dtjob_api.validation import validate_job
from dtjob_trainer.config import config_to_spec, load_config
from dtjob_trainer.errors import ConfigError


def _error(spec: Any) -> str:
    with pytest.raises(ConfigError) as exc:
        load_config(spec)
    return str(exc.value)


def test_minimal_spec_gets_the_api_defaults() -> None:
    cfg = load_config({"strategy": {"type": "DataParallel"}, "roles": {"worker": {}}})
    t = cfg.trainer
    assert isinstance(t, TrainerSpec)  # dtjob_api's own model, not a copy
    assert (t.batchSize, t.steps, t.seed, t.logEverySteps) == (64, 100, 0, 10)
    assert t.model.hiddenSizes == [64, 64, 64]
    assert (t.optimizer.type, t.optimizer.lr) == ("SGD", 0.05)
    assert (cfg.checkpoint.mountPath, cfg.checkpoint.everySteps, cfg.checkpoint.keep) == (
        "/checkpoints",
        50,
        2,
    )
    assert cfg.network.masterPort == 29500
    # Settings blocks the spec leaves out count with their API defaults, as in the rules.
    assert (cfg.parameter_server.mode, cfg.pipeline.microbatches) == ("Sync", 4)
    assert cfg.strategy.parameterServer is None


def test_the_operators_fields_are_validated_like_the_rest() -> None:
    spec = a_spec("DataParallel")
    spec["runPolicy"] = {"backoffLimit": 3}
    spec["suspend"] = False
    spec["roles"]["worker"].update(cpu="2", memory="4Gi", template={"spec": {"priority": 1}})
    spec["trainer"].update(image="img")
    spec["network"].update(shmSize="1Gi", ncclDebug="WARN")
    spec["checkpoint"]["claimName"] = "pvc"
    spec["strategy"].update(parameterServer=None, pipeline=None, hybrid=None)
    assert load_config(spec).strategy.type == StrategyType.DATA_PARALLEL
    spec["runPolicy"]["backoffLimit"] = -1
    assert "runPolicy.backoffLimit: Input should be greater than or equal to 0" in _error(spec)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (("trainer", "optimizer"), "trainer.optimizer.lrate: unknown field (check the spelling"),
        (("trainer",), "trainer.lrate: unknown field"),
        (("strategy",), "strategy.lrate: unknown field"),
        # The whole spec is the API's model: a misspelt section is no longer skipped.
        ((), "lrate: unknown field"),
    ],
)
def test_unknown_fields_are_refused_at_every_level(section: tuple[str, ...], message: str) -> None:
    spec = a_spec("DataParallel")
    target = spec
    for key in section:
        target = target[key]
    target["lrate"] = 0.1
    assert _error(spec).startswith(message)


def test_field_errors_name_the_path() -> None:
    spec = a_spec("DataParallel", optimizer={"lr": -1}, model={"hiddenSizes": [8, "x"]})
    msg = _error(spec)
    assert "trainer.optimizer.lr: Input should be greater than 0 (got -1)" in msg
    assert "trainer.model.hiddenSizes[1]:" in msg
    assert _error(["not", "a", "spec"]) == "(config): must be a JSON object (the job's spec)"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            a_spec("DataParallel", workers=3, batchSize=2),
            "trainer.batchSize: must be at least the worker processes",
        ),
        (a_spec("FSDP", workers=None), "roles.worker: required for strategy FSDP"),
        (a_spec("Pipeline", workers=2), "roles.stage: required for strategy Pipeline"),
        (a_spec("DataParallel", ps=1), "roles.ps: only allowed with strategy ParameterServer"),
        (
            a_spec("ParameterServer", strategy_extra={"parameterServer": {"mode": "Async"}}),
            "roles.ps: required for strategy ParameterServer in mode Async",
        ),
        (
            a_spec(
                "ParameterServer",
                workers=2,
                ps=1,
                batchSize=36,
                strategy_extra={"parameterServer": {"mode": "Hogwild", "hogwildProcesses": 4}},
            ),
            "trainer.batchSize: must be divisible by the Hogwild processes",
        ),
        (
            a_spec("DataParallel", model={"type": "GPT"}),
            "trainer.dataset.type: does not fit the model",
        ),
        (
            a_spec(
                "DataParallel",
                model={"type": "GPT", "dModel": 30, "heads": 4},
                dataset={"type": "SyntheticTokens"},
            ),
            "trainer.model.dModel: must be a multiple of trainer.model.heads",
        ),
        (
            a_spec("Pipeline", workers=None, stages=5),
            "roles.stage: more pipeline stages than the model has blocks",
        ),
        (
            a_spec(
                "Pipeline",
                workers=None,
                stages=2,
                strategy_extra={"pipeline": {"microbatches": 5}},
            ),
            "trainer.batchSize: must be divisible by strategy.pipeline.microbatches",
        ),
        (
            a_spec(
                "Hybrid", workers=None, stages=3, strategy_extra={"hybrid": {"dataParallel": 2}}
            ),
            "strategy.hybrid.dataParallel: must divide the stage processes",
        ),
    ],
)
def test_cross_field_rules_are_dtjob_apis(spec: dict[str, Any], message: str) -> None:
    msg = _error(spec)
    assert message in msg
    # The same rule, worded the same, as the operator reports it (under spec.).
    assert f"spec.{message}" in [str(e)[: len(message) + 5] for e in validate_job(spec)]


def test_the_bundled_trainers_rules_hold_under_a_custom_command() -> None:
    # With trainer.command set the API leaves the bundled trainer's rules out (custom code
    # may split the batch as it likes); this trainer, started by that command, still needs
    # them.
    spec = a_spec("DataParallel", workers=3, batchSize=2, command=["python", "-m", "x"])
    assert validate_job(spec) == []
    assert "trainer.batchSize: must be at least the worker processes" in _error(spec)


def test_sizes_of_the_process_grid() -> None:
    hybrid = load_config(
        a_spec("Hybrid", workers=None, stages=4, strategy_extra={"hybrid": {"dataParallel": 2}})
    )
    assert (hybrid.world_size(), hybrid.pipeline_size(), hybrid.data_parallel_size()) == (4, 2, 2)
    ps = load_config(a_spec("ParameterServer", workers=2, ps=2, procs_per_pod=2))
    assert (ps.world_size(), ps.data_parallel_size()) == (6, 4)
    assert (ps.role_processes("worker"), ps.role_processes("ps"), ps.pipeline_size()) == (4, 2, 1)


def test_round_trip_through_the_wire_format() -> None:
    cfg = load_config(a_spec("FSDP", optimizer={"type": "AdamW", "weightDecay": 0.1}))
    wire = config_to_spec(cfg)
    assert wire["trainer"]["optimizer"]["weightDecay"] == 0.1
    assert wire["trainer"]["batchSize"] == 32
    assert wire["runPolicy"]["backoffLimit"] >= 0  # the whole spec, defaults filled
    assert load_config(wire) == cfg
