"""tf.distribute strategy names, accepted in `spec.strategy.type` for users who come from
TensorFlow, and what each one runs (docs/strategies.md says what is and is not the same):

| alias | runs |
| --- | --- |
| MirroredStrategy | DataParallel (synchronous all-reduce of gradients) |
| MultiWorkerMirroredStrategy | DataParallel |
| CentralStorageStrategy | CPUOffload (parameters and optimizer state in host memory) |
| ParameterServerStrategy | ParameterServer in mode Async (no barrier between workers) |

An alias is resolved once, here, and everything downstream sees only its target: the CRD's
rules (through facts.cel_is and facts.MODE, so an alias is held to exactly its target's
roles and sizes; their messages name the strategy as written), the operator's validation,
every Job the builders see (builders/job.py), the env contract (DTJ_STRATEGY), the job
config the trainer reads, and status.strategy (the STRATEGY column).
The manifest keeps what the user wrote.
"""

from __future__ import annotations

from dtjob_api.spec import (
    DistributedTrainingJobSpec,
    ParameterServerSpec,
    PSMode,
    StrategySpec,
    StrategyType,
)

ALIASES: dict[StrategyType, StrategyType] = {
    StrategyType.MIRRORED_STRATEGY: StrategyType.DATA_PARALLEL,
    StrategyType.MULTI_WORKER_MIRRORED_STRATEGY: StrategyType.DATA_PARALLEL,
    StrategyType.CENTRAL_STORAGE_STRATEGY: StrategyType.CPU_OFFLOAD,
    StrategyType.PARAMETER_SERVER_STRATEGY: StrategyType.PARAMETER_SERVER,
}
# TF's ParameterServerStrategy is asynchronous: its workers update the variables on the
# parameter servers without waiting for each other. It has no other mode, so an alias job
# may not choose one (rules.py refuses strategy.parameterServer with it).
ALIAS_MODES: dict[StrategyType, PSMode] = {StrategyType.PARAMETER_SERVER_STRATEGY: PSMode.ASYNC}


def resolved_type(declared: StrategyType | str) -> StrategyType:
    """The strategy that runs for `declared` (itself unless it is an alias)."""
    kind = StrategyType(declared)
    return ALIASES.get(kind, kind)


def resolved_mode(strategy: StrategySpec) -> PSMode:
    """The parameter-server mode that runs: the alias's own, else the setting (or its
    default)."""
    forced = ALIAS_MODES.get(StrategyType(strategy.type))
    if forced is not None:
        return forced
    return PSMode((strategy.parameterServer or ParameterServerSpec()).mode)


def resolve(spec: DistributedTrainingJobSpec) -> DistributedTrainingJobSpec:
    """The spec with an alias replaced by its target (and the alias's mode filled in); the
    same object when the strategy is no alias."""
    declared = StrategyType(spec.strategy.type)
    if declared not in ALIASES:
        return spec
    update: dict[str, object] = {"type": ALIASES[declared].value}
    if declared in ALIAS_MODES:
        update["parameterServer"] = ParameterServerSpec(mode=ALIAS_MODES[declared])
    strategy = spec.strategy.model_copy(update=update)
    return spec.model_copy(update={"strategy": strategy})


def cel_resolved_mode(declared: str, mode: str) -> str:
    """CEL: the parameter-server mode that runs, from the declared type and the CEL `mode`
    of the settings."""
    expr = mode
    for alias, forced in ALIAS_MODES.items():
        expr = f'({declared} == "{alias.value}" ? "{forced.value}" : {expr})'
    return expr
