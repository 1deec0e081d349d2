"""The job config as the bundled trainer reads it: the job's spec (the JSON at DTJ_CONFIG,
camelCase, defaults filled by the operator), parsed by dtjob_api's model and held to
dtjob_api's rules, the same ones the CRD and the operator enforce.

This module adds no field and no rule. It holds the parsed spec, runs the strategy a
tf.distribute alias stands for (as the operator does), and derives what the trainer needs
from a valid spec: process counts, the pipeline and data-parallel degrees, the strategy's
settings with the API's defaults where the spec leaves them out.

`load_config(data)` raises `ConfigError` listing every problem, each named by its path in
the spec, e.g. ``trainer.batchSize: must be at least the worker processes ...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dtjob_api.aliases import resolve
from dtjob_api.errors import SpecInvalid
from dtjob_api.facts import Facts
from dtjob_api.spec import (
    CheckpointSpec,
    DistributedTrainingJobSpec,
    HybridSpec,
    NetworkSpec,
    ParameterServerSpec,
    PipelineSpec,
    PSMode,
    RolesSpec,
    StrategySpec,
    StrategyType,
    TensorParallelSpec,
    TrainerSpec,
)
from dtjob_api.validation import parse_spec
from dtjob_trainer.errors import ConfigError


@dataclass(frozen=True)
class TrainerConfig:
    """A valid job spec and what the trainer derives from it."""

    spec: DistributedTrainingJobSpec
    """The job's spec, a tf.distribute alias replaced by the strategy it runs."""
    facts: Facts = field(init=False, repr=False, compare=False)
    """The quantities dtjob_api's rules talk about (process counts, model blocks)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", resolve(self.spec))
        object.__setattr__(self, "facts", Facts.of(self.spec))

    @property
    def strategy(self) -> StrategySpec:
        """spec.strategy."""
        return self.spec.strategy

    @property
    def roles(self) -> RolesSpec:
        """spec.roles."""
        return self.spec.roles

    @property
    def trainer(self) -> TrainerSpec:
        """spec.trainer."""
        return self.spec.trainer

    @property
    def checkpoint(self) -> CheckpointSpec:
        """spec.checkpoint."""
        return self.spec.checkpoint

    @property
    def network(self) -> NetworkSpec:
        """spec.network."""
        return self.spec.network

    # The strategy's settings: the API leaves an unset block out (its rules forbid it with
    # other strategies), and its model defaults are what the rules counted with.
    @property
    def parameter_server(self) -> ParameterServerSpec:
        """spec.strategy.parameterServer, or its defaults."""
        return self.spec.strategy.parameterServer or ParameterServerSpec()

    @property
    def pipeline(self) -> PipelineSpec:
        """spec.strategy.pipeline, or its defaults."""
        return self.spec.strategy.pipeline or PipelineSpec()

    @property
    def hybrid(self) -> HybridSpec:
        """spec.strategy.hybrid, or its defaults."""
        return self.spec.strategy.hybrid or HybridSpec()

    @property
    def tensor_parallel(self) -> TensorParallelSpec:
        """spec.strategy.tensorParallel, or its defaults."""
        return self.spec.strategy.tensorParallel or TensorParallelSpec()

    def role_processes(self, role: str) -> int:
        """Total processes of a role (0 when the role is absent)."""
        f = self.facts
        return {"worker": f.workerProcesses, "stage": f.stageProcesses, "ps": f.psProcesses}[role]

    def world_size(self) -> int:
        """Processes of the whole job."""
        return sum(self.role_processes(r) for r in ("worker", "stage", "ps"))

    def pipeline_size(self) -> int:
        """Pipeline degree: stage processes (divided by the data-parallel degree for
        Hybrid and by the stage tensor-parallel degree); 1 without stages."""
        return max(1, self.facts.pipelineDegree)

    def stage_tensor_parallel_size(self) -> int:
        """Tensor-parallel degree inside each pipeline stage (Pipeline, Hybrid): 1 unless
        strategy.tensorParallel is set (the rules refuse it with other stage strategies;
        TensorParallel's own size is `tensor_parallel`)."""
        if self.strategy.type not in (StrategyType.PIPELINE, StrategyType.HYBRID):
            return 1
        return self.facts.stageTensorParallel

    def data_parallel_size(self) -> int:
        """Processes the global batch is split over (1 for ModelParallel and Pipeline)."""
        kind, f = self.strategy.type, self.facts
        if kind == StrategyType.HYBRID:
            return f.dataParallel
        if kind in (StrategyType.MODEL_PARALLEL, StrategyType.PIPELINE):
            return 1
        workers = max(1, f.workerProcesses)
        if kind == StrategyType.TENSOR_PARALLEL:
            # Each group of `size` processes shares one replica and one batch shard.
            return max(1, workers // f.tensorParallel)
        if kind == StrategyType.PARAMETER_SERVER and f.mode == PSMode.HOGWILD:
            # Each worker process runs hogwildProcesses trainers, each on its own shard.
            return f.hogwildParts
        return workers


def load_config(data: object) -> TrainerConfig:
    """Parse and validate a spec; raise ConfigError listing every problem with its path.

    The bundled trainer's rules apply even when trainer.command is set: whoever runs this
    trainer under a custom command gets the checks that its own code depends on.
    """
    if not isinstance(data, Mapping):
        raise ConfigError("(config): must be a JSON object (the job's spec)")
    try:
        spec = parse_spec(data, root="", bundled_trainer=True)
    except SpecInvalid as exc:
        raise ConfigError(str(exc)) from None
    return TrainerConfig(spec)


def config_to_spec(cfg: TrainerConfig) -> dict[str, Any]:
    """The config as a camelCase spec dict (what DTJ_CONFIG holds)."""
    return cfg.spec.to_api()
