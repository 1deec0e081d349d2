"""The trainer's job-config model: defaults, ignored and refused fields, cross-field rules,
and messages that name the field."""

from __future__ import annotations

from typing import Any

import pytest
from unit.trainer.harness import a_spec

from dtjob_trainer.config import StrategyType, config_to_spec, load_config
from dtjob_trainer.errors import ConfigError


def _error(spec: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as exc:
        load_config(spec)
    return str(exc.value)


def test_minimal_spec_gets_the_operator_defaults() -> None:
    cfg = load_config({"strategy": {"type": "DataParallel"}, "roles": {"worker": {}}})
    t = cfg.trainer
    assert (t.batch_size, t.steps, t.seed, t.log_every_steps) == (64, 100, 0, 10)
    assert t.model.hidden_sizes == [64, 64, 64]
    assert (t.optimizer.type, t.optimizer.lr) == ("SGD", 0.05)
    assert (cfg.checkpoint.mount_path, cfg.checkpoint.every_steps, cfg.checkpoint.keep) == (
        "/checkpoints",
        50,
        2,
    )
    assert cfg.network.master_port == 29500
    assert cfg.strategy.parameter_server.mode == "Sync"


def test_operator_only_fields_are_accepted_and_ignored() -> None:
    spec = a_spec("DataParallel")
    spec["runPolicy"] = {"backoffLimit": 3}
    spec["suspend"] = False
    spec["roles"]["worker"].update(cpu="2", memory="4Gi", template={"nodeSelector": {}})
    spec["trainer"].update(image="img", command=None)
    spec["network"].update(shmSize="1Gi", ncclDebug="WARN")
    spec["checkpoint"]["claimName"] = "pvc"
    spec["strategy"].update(parameterServer=None, pipeline=None, hybrid=None)
    assert load_config(spec).strategy.type == StrategyType.DATA_PARALLEL


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (("trainer", "optimizer"), "trainer.optimizer.lrate: Extra inputs are not permitted"),
        (("trainer",), "trainer.lrate: Extra inputs are not permitted"),
        (("strategy",), "strategy.lrate: Extra inputs are not permitted"),
    ],
)
def test_typos_inside_used_sections_are_refused(section: tuple[str, ...], message: str) -> None:
    spec = a_spec("DataParallel")
    target = spec
    for key in section:
        target = target[key]
    target["lrate"] = 0.1
    assert message in _error(spec)


def test_field_errors_name_the_path() -> None:
    spec = a_spec("DataParallel", optimizer={"lr": -1}, model={"hiddenSizes": [8, "x"]})
    msg = _error(spec)
    assert "trainer.optimizer.lr: Input should be greater than 0" in msg
    assert "trainer.model.hiddenSizes[1]:" in msg


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            a_spec("DataParallel", workers=3, batchSize=32),
            "trainer.batchSize: must be divisible by the data-parallel size 3",
        ),
        (a_spec("FSDP", workers=None), "roles.worker: required by strategy FSDP"),
        (a_spec("Pipeline", workers=2), "roles.stage: required by strategy Pipeline"),
        (a_spec("DataParallel", ps=1), "roles.ps: only the ParameterServer strategy uses it"),
        (
            a_spec("ParameterServer", strategy_extra={"parameterServer": {"mode": "Async"}}),
            "roles.ps: required by ParameterServer mode Async",
        ),
        (
            a_spec(
                "ParameterServer",
                workers=2,
                ps=1,
                batchSize=36,
                strategy_extra={"parameterServer": {"mode": "Hogwild", "hogwildProcesses": 4}},
            ),
            "trainer.batchSize: must be divisible by the data-parallel size 8",
        ),
        (
            a_spec("ParameterServer", strategy_extra={"parameterServer": {"mode": "Hogwild"}}),
            "roles.ps: required by ParameterServer mode Hogwild with more than one worker",
        ),
        (
            a_spec("DataParallel", model={"type": "GPT"}),
            "trainer.dataset.type: model GPT needs SyntheticTokens",
        ),
        (
            a_spec(
                "DataParallel",
                model={"type": "GPT", "dModel": 30, "heads": 4},
                dataset={"type": "SyntheticTokens"},
            ),
            "trainer.model.dModel: must be a multiple of heads (4)",
        ),
        (
            a_spec("Pipeline", workers=None, stages=5),
            "roles.stage: 5 pipeline stages but the model has only 4 blocks",
        ),
        (
            a_spec(
                "Pipeline",
                workers=None,
                stages=2,
                strategy_extra={"pipeline": {"microbatches": 5}},
            ),
            "strategy.pipeline.microbatches: must divide the per-replica batch 32",
        ),
        (
            a_spec(
                "Hybrid", workers=None, stages=3, strategy_extra={"hybrid": {"dataParallel": 2}}
            ),
            "strategy.hybrid.dataParallel: must divide the stage processes 3",
        ),
    ],
)
def test_cross_field_rules(spec: dict[str, Any], message: str) -> None:
    assert message in _error(spec)


def test_sizes_of_the_process_grid() -> None:
    hybrid = load_config(
        a_spec("Hybrid", workers=None, stages=4, strategy_extra={"hybrid": {"dataParallel": 2}})
    )
    assert (hybrid.world_size(), hybrid.pipeline_size(), hybrid.data_parallel_size()) == (4, 2, 2)
    ps = load_config(a_spec("ParameterServer", workers=2, ps=2, procs_per_pod=2))
    assert (ps.world_size(), ps.data_parallel_size()) == (6, 4)


def test_round_trip_through_the_wire_format() -> None:
    cfg = load_config(a_spec("FSDP", optimizer={"type": "AdamW", "weightDecay": 0.1}))
    wire = config_to_spec(cfg)
    assert wire["trainer"]["optimizer"]["weightDecay"] == 0.1
    assert wire["trainer"]["batchSize"] == 32
    assert load_config(wire) == cfg
