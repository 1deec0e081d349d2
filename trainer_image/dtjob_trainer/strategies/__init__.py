"""Strategy registry: one module per strategy, imported lazily by name.

Every strategy module exposes `run(ctx: RunContext) -> RunResult`. The key of a job is
`strategy.type`, or `ParameterServer/<mode>` for the parameter-server modes.
A strategy whose module is not part of this build fails with a clear config error.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from dtjob_api.spec import StrategyType
from dtjob_trainer.config import TrainerConfig
from dtjob_trainer.errors import ConfigError

if TYPE_CHECKING:
    from dtjob_trainer.context import RunContext, RunResult

StrategyFn = Callable[["RunContext"], "RunResult"]

MODULES: dict[str, str] = {
    "DataParallel": "data_parallel",
    "ParameterServer/Sync": "ps_sync",
    "ParameterServer/Async": "ps_async",
    "ParameterServer/Hogwild": "hogwild",
    "ParameterServer/EASGD": "easgd",
    "ParameterServer/EASGDRoundRobin": "easgd_round_robin",
    "ModelParallel": "model_parallel",
    "Pipeline": "pipeline",
    "Hybrid": "hybrid",
    "FSDP": "fsdp",
    "CPUOffload": "cpu_offload",
    "Auto": "auto",
    "TensorParallel": "tensor_parallel",
    # A stage role split into groups: per-stage devices (heterogeneous pipeline).
    "Pipeline/StageGroups": "stage_groups",
    "ModelParallel/StageGroups": "stage_groups",
    # Pipeline and Hybrid with strategy.tensorParallel: 3-D parallelism.
    "Pipeline/TensorParallel": "pipeline_tp",
    "Hybrid/TensorParallel": "pipeline_tp",
}


def strategy_key(cfg: TrainerConfig) -> str:
    """Registry key of the job's strategy."""
    if cfg.strategy.type == StrategyType.PARAMETER_SERVER:
        return f"ParameterServer/{cfg.parameter_server.mode}"
    stage = cfg.roles.stage
    if stage is not None and stage.groups:
        return f"{cfg.strategy.type}/StageGroups"
    if cfg.stage_tensor_parallel_size() > 1:
        return f"{cfg.strategy.type}/TensorParallel"
    return str(cfg.strategy.type)


def load_strategy(key: str) -> StrategyFn:
    """The `run` function of a strategy; ConfigError when it is unknown or not built in."""
    if key not in MODULES:
        raise ConfigError(f"strategy.type: unknown strategy {key!r}")
    name = f"{__name__}.{MODULES[key]}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise ConfigError(
            f"strategy.type: {key} is not available in this trainer build (module {name} "
            f"is missing)"
        ) from None
    return cast(StrategyFn, module.run)
