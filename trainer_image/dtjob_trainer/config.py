"""The trainer's own model of the job config (the job's spec as JSON, camelCase, defaults
filled, at the path in DTJ_CONFIG).

It mirrors the fields of the operator's spec that the trainer needs and never imports the
operator. Unknown top-level keys and sections the trainer does not use are ignored; inside
the sections it uses, unknown keys are refused so that a typo is an error. Attributes are
snake_case, the wire names camelCase. Every error names the field path, e.g.
``trainer.batchSize: must be divisible by the data-parallel size 3``.

`load_config(data)` validates a spec dict and raises `ConfigError` with every problem;
`check_consistency(cfg)` holds the cross-field rules (pure, returns messages).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from dtjob_trainer.aliases import resolve_strategy
from dtjob_trainer.errors import ConfigError


class _Section(BaseModel):
    """A section the trainer uses: camelCase on the wire, unknown keys refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class StrategyType(StrEnum):
    """Strategy names, as in spec.strategy.type."""

    DATA_PARALLEL = "DataParallel"
    PARAMETER_SERVER = "ParameterServer"
    MODEL_PARALLEL = "ModelParallel"
    PIPELINE = "Pipeline"
    HYBRID = "Hybrid"
    FSDP = "FSDP"
    CPU_OFFLOAD = "CPUOffload"
    AUTO = "Auto"
    TENSOR_PARALLEL = "TensorParallel"


class PSMode(StrEnum):
    """Parameter-server update rules."""

    SYNC = "Sync"
    ASYNC = "Async"
    HOGWILD = "Hogwild"
    EASGD = "EASGD"
    EASGD_ROUND_ROBIN = "EASGDRoundRobin"


class PipelineSchedule(StrEnum):
    """Micro-batch schedules of torch.distributed.pipelining."""

    GPIPE = "GPipe"
    ONE_F_ONE_B = "1F1B"
    INTERLEAVED_1F1B = "Interleaved1F1B"
    PIPEDREAM = "PipeDream"
    PIPEDREAM_2BW = "PipeDream2BW"


class ModelType(StrEnum):
    """Models the trainer can build."""

    MLP = "MLP"
    CNN = "CNN"
    GPT = "GPT"


class DatasetType(StrEnum):
    """Data sets (bundled or generated; nothing is downloaded)."""

    DIGITS = "Digits"
    SYNTHETIC_TOKENS = "SyntheticTokens"


class OptimizerType(StrEnum):
    """Optimizers."""

    SGD = "SGD"
    ADAM = "Adam"
    ADAMW = "AdamW"


class Precision(StrEnum):
    """fp64 for exact equivalence checks, bf16 (autocast, fp32 master weights) for speed."""

    FP32 = "fp32"
    FP64 = "fp64"
    BF16 = "bf16"


class ParameterServerConfig(_Section):
    """spec.strategy.parameterServer."""

    mode: PSMode = PSMode.SYNC
    rho: float = Field(default=0.1, ge=0.0, le=10.0)
    tau: int = Field(default=4, ge=1)
    hogwild_processes: int = Field(default=2, ge=1, le=64)


class PipelineConfig(_Section):
    """spec.strategy.pipeline."""

    schedule: PipelineSchedule = PipelineSchedule.GPIPE
    microbatches: int = Field(default=4, ge=1)
    stages_per_rank: int = Field(default=2, ge=1, le=16)


class HybridConfig(_Section):
    """spec.strategy.hybrid."""

    data_parallel: int = Field(default=2, ge=1)


class TensorParallelConfig(_Section):
    """spec.strategy.tensorParallel."""

    size: int = Field(default=2, ge=1)


def _none_as_default(value: object) -> object:
    # "defaults filled" specs may carry explicit nulls for optional sub-sections.
    return {} if value is None else value


class StrategyConfig(_Section):
    """spec.strategy; the optional sub-sections are defaulted when absent."""

    type: StrategyType
    backend: str = Field(default="auto", pattern=r"^(auto|nccl|gloo)$")
    parameter_server: Annotated[ParameterServerConfig, BeforeValidator(_none_as_default)] = Field(
        default_factory=ParameterServerConfig
    )
    pipeline: Annotated[PipelineConfig, BeforeValidator(_none_as_default)] = Field(
        default_factory=PipelineConfig
    )
    hybrid: Annotated[HybridConfig, BeforeValidator(_none_as_default)] = Field(
        default_factory=HybridConfig
    )
    tensor_parallel: Annotated[TensorParallelConfig, BeforeValidator(_none_as_default)] = Field(
        default_factory=TensorParallelConfig
    )

    @model_validator(mode="before")
    @classmethod
    def _tf_alias(cls, data: Any) -> Any:
        # A tf.distribute name runs its target strategy (aliases.py).
        return resolve_strategy(data)


class StageGroupConfig(_Section):
    """One group of roles.stage.groups (a heterogeneous pipeline): consecutive stage pods
    with their own device (gpus 0: CPU, 1: GPU) and, optionally, blocks per stage."""

    name: str
    replicas: int = Field(default=1, ge=1)
    gpus: int = Field(default=0, ge=0, le=1)
    cpu: Any = None
    memory: Any = None
    blocks: int | None = Field(default=None, ge=1)


class RoleConfig(_Section):
    """One role; pod-level fields the trainer does not use are accepted and ignored."""

    replicas: int = Field(default=1, ge=1)
    gpus: int = Field(default=0, ge=0)
    procs_per_pod: int | None = Field(default=None, ge=1)
    gpu_resource: Any = None
    extended_resources: Any = None
    cpu: Any = None
    memory: Any = None
    template: Any = None
    groups: list[StageGroupConfig] | None = None

    def processes(self) -> int:
        """Processes per pod: procsPerPod, else one per GPU, else 1."""
        if self.procs_per_pod is not None:
            return self.procs_per_pod
        return self.gpus if self.gpus > 0 else 1

    def total_processes(self) -> int:
        """Processes of the whole role."""
        return self.replicas * self.processes()


class RolesConfig(_Section):
    """spec.roles."""

    worker: RoleConfig | None = None
    ps: RoleConfig | None = None
    stage: RoleConfig | None = None


class ModelConfig(_Section):
    """spec.trainer.model."""

    type: ModelType = ModelType.MLP
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64, 64], min_length=1)
    layers: int = Field(default=2, ge=1)
    d_model: int = Field(default=64, ge=8)
    heads: int = Field(default=4, ge=1)
    seq_len: int = Field(default=32, ge=2)
    vocab_size: int = Field(default=256, ge=2)


class DatasetConfig(_Section):
    """spec.trainer.dataset."""

    type: DatasetType = DatasetType.DIGITS
    test_fraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    samples: int = Field(default=8192, ge=1)
    eval_samples: int = Field(default=10000, ge=1)


class OptimizerConfig(_Section):
    """spec.trainer.optimizer."""

    type: OptimizerType = OptimizerType.SGD
    lr: float = Field(default=0.05, gt=0.0)
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0)
    weight_decay: float = Field(default=0.0, ge=0.0)


class TrainerSection(_Section):
    """spec.trainer; image/command fields belong to the operator and are ignored."""

    image: Any = None
    image_pull_policy: Any = None
    command: Any = None
    args: Any = None
    model: ModelConfig = Field(default_factory=ModelConfig)
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    batch_size: int = Field(default=64, ge=1)
    """GLOBAL batch per step, across all data-parallel processes."""
    steps: int = Field(default=100, ge=1)
    seed: int = Field(default=0, ge=0, le=2147483647)
    precision: Precision = Precision.FP32
    log_every_steps: int = Field(default=10, ge=1)


class CheckpointConfig(_Section):
    """spec.checkpoint."""

    claim_name: Any = None
    mount_path: str = "/checkpoints"
    every_steps: int = Field(default=50, ge=1)
    keep: int = Field(default=2, ge=1)


class NetworkConfig(_Section):
    """spec.network; the NCCL and shm fields are the operator's and ignored here."""

    master_port: int = Field(default=29500, ge=1, le=65535)
    rendezvous_timeout_seconds: int = Field(default=300, ge=1)
    shm_size: Any = None
    nccl_socket_ifname: Any = None
    nccl_debug: Any = None


class TrainerConfig(BaseModel):
    """The job config as the trainer sees it."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    strategy: StrategyConfig
    roles: RolesConfig
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)

    def role_processes(self, role: str) -> int:
        """Total processes of a role (0 when the role is absent)."""
        spec: RoleConfig | None = getattr(self.roles, role)
        return spec.total_processes() if spec is not None else 0

    def world_size(self) -> int:
        """Processes of the whole job."""
        return sum(self.role_processes(r) for r in ("worker", "stage", "ps"))

    def pipeline_size(self) -> int:
        """Pipeline degree: stage processes (divided by the data-parallel degree for Hybrid)."""
        stages = self.role_processes("stage")
        if self.strategy.type == StrategyType.HYBRID:
            return max(1, stages // self.strategy.hybrid.data_parallel)
        return max(1, stages)

    def data_parallel_size(self) -> int:
        """Processes the global batch is split over (1 for ModelParallel and Pipeline)."""
        kind = self.strategy.type
        if kind == StrategyType.HYBRID:
            return self.strategy.hybrid.data_parallel
        if kind in (StrategyType.MODEL_PARALLEL, StrategyType.PIPELINE):
            return 1
        workers = max(1, self.role_processes("worker"))
        if kind == StrategyType.TENSOR_PARALLEL:
            # Each group of `size` processes shares one replica and one batch shard.
            return max(1, workers // self.strategy.tensor_parallel.size)
        if kind == StrategyType.PARAMETER_SERVER and self.strategy.parameter_server.mode == (
            PSMode.HOGWILD
        ):
            # Each worker process runs hogwildProcesses trainers, each on its own shard.
            return workers * self.strategy.parameter_server.hogwild_processes
        return workers


STAGE_STRATEGIES = (StrategyType.MODEL_PARALLEL, StrategyType.PIPELINE, StrategyType.HYBRID)


def model_blocks(cfg: TrainerConfig) -> int:
    """Blocks the model is built of (the units stages split); see dtjob_trainer.models."""
    m = cfg.trainer.model
    if m.type == ModelType.MLP:
        return len(m.hidden_sizes) + 1
    if m.type == ModelType.CNN:
        return 4
    return m.layers + 2


def check_consistency(cfg: TrainerConfig) -> list[str]:
    """Cross-field rules; returns "field.path: problem" messages (empty when valid)."""
    problems: list[str] = []
    kind = cfg.strategy.type
    t = cfg.trainer
    if kind in STAGE_STRATEGIES:
        if cfg.roles.stage is None:
            problems.append(f"roles.stage: required by strategy {kind.value}")
        if cfg.roles.worker is not None:
            problems.append(f"roles.worker: not used by strategy {kind.value}; use roles.stage")
    elif cfg.roles.worker is None:
        problems.append(f"roles.worker: required by strategy {kind.value}")
    if cfg.roles.ps is not None and kind != StrategyType.PARAMETER_SERVER:
        problems.append(f"roles.ps: only the ParameterServer strategy uses it, not {kind.value}")
    mode = cfg.strategy.parameter_server.mode
    if kind == StrategyType.PARAMETER_SERVER and cfg.roles.ps is None:
        # EASGD without ps is its synchronous form (the centre replicated on the workers).
        if mode in (PSMode.ASYNC, PSMode.EASGD_ROUND_ROBIN):
            problems.append(f"roles.ps: required by ParameterServer mode {mode.value}")
        elif mode == PSMode.HOGWILD and cfg.role_processes("worker") > 1:
            problems.append(
                "roles.ps: required by ParameterServer mode Hogwild with more than one worker "
                "process (the parameter servers hold the shared model)"
            )
    if kind == StrategyType.PARAMETER_SERVER and mode == PSMode.EASGD_ROUND_ROBIN:
        problems += _round_robin_problems(cfg)
    if problems:
        return problems

    if kind == StrategyType.TENSOR_PARALLEL:
        problems += tensor_parallel_problems(cfg)
        if problems:
            return problems
    dp = cfg.data_parallel_size()
    if kind == StrategyType.HYBRID and cfg.role_processes("stage") % dp != 0:
        problems.append(
            f"strategy.hybrid.dataParallel: must divide the stage processes "
            f"{cfg.role_processes('stage')}"
        )
    if t.batch_size % dp != 0:
        problems.append(f"trainer.batchSize: must be divisible by the data-parallel size {dp}")
    if kind in (StrategyType.PIPELINE, StrategyType.HYBRID):
        mb = cfg.strategy.pipeline.microbatches
        if (t.batch_size // dp) % mb != 0:
            problems.append(
                f"strategy.pipeline.microbatches: must divide the per-replica batch "
                f"{t.batch_size // dp} (trainer.batchSize / data-parallel size)"
            )
    if kind in STAGE_STRATEGIES:
        stages = cfg.pipeline_size()
        if cfg.strategy.pipeline.schedule == PipelineSchedule.INTERLEAVED_1F1B and kind != (
            StrategyType.MODEL_PARALLEL
        ):
            stages *= cfg.strategy.pipeline.stages_per_rank
        if stages > model_blocks(cfg):
            problems.append(
                f"roles.stage: {stages} pipeline stages but the model has only "
                f"{model_blocks(cfg)} blocks (add trainer.model.hiddenSizes or layers)"
            )

    m = t.model
    wanted = DatasetType.SYNTHETIC_TOKENS if m.type == ModelType.GPT else DatasetType.DIGITS
    if t.dataset.type != wanted:
        problems.append(f"trainer.dataset.type: model {m.type.value} needs {wanted.value}")
    if m.type == ModelType.GPT and m.d_model % m.heads != 0:
        problems.append(f"trainer.model.dModel: must be a multiple of heads ({m.heads})")
    if m.type == ModelType.MLP and any(h < 1 for h in m.hidden_sizes):
        problems.append("trainer.model.hiddenSizes: every width must be at least 1")
    return problems


def _round_robin_problems(cfg: TrainerConfig) -> list[str]:
    # The schedule's sizes (the API's rules say the same): one master holds the centre, and
    # a round needs workers to take turns.
    problems = []
    if cfg.roles.ps is not None and cfg.role_processes("ps") != 1:
        problems.append(
            "roles.ps: ParameterServer mode EASGDRoundRobin keeps the centre on one master: "
            f"exactly 1 ps process (replicas x procsPerPod), got {cfg.role_processes('ps')}"
        )
    if cfg.roles.worker is not None and cfg.role_processes("worker") < 2:
        problems.append(
            "roles.worker: ParameterServer mode EASGDRoundRobin needs at least 2 worker "
            "processes to take turns at the centre"
        )
    return problems


def tensor_parallel_problems(cfg: TrainerConfig) -> list[str]:
    """What stops the job from splitting its model over strategy.tensorParallel.size
    processes, as "field.path: problem" messages."""
    tp = cfg.strategy.tensor_parallel.size
    workers = cfg.role_processes("worker")
    if workers % tp != 0:
        return [
            f"strategy.tensorParallel.size: {tp} must divide the {workers} worker processes "
            "(replicas x procsPerPod); the data-parallel degree is their quotient"
        ]
    return tensor_parallel_model_problems(cfg.trainer.model, tp)


def tensor_parallel_model_problems(m: ModelConfig, tp: int) -> list[str]:
    """What stops model `m` from splitting over `tp` processes (the plans of
    `dtjob_trainer.models.tp_plan` split attention by heads and Linears by features)."""
    if m.type == ModelType.GPT and m.heads % tp != 0:
        return [
            f"trainer.model.heads: {m.heads} heads cannot be split over "
            f"strategy.tensorParallel.size {tp} (attention is split by heads)"
        ]
    if m.type == ModelType.MLP and any(h % tp for h in m.hidden_sizes):
        return [
            f"trainer.model.hiddenSizes: every width must be a multiple of "
            f"strategy.tensorParallel.size {tp} (the layers are split by features)"
        ]
    if m.type == ModelType.CNN:
        return ["trainer.model.type: CNN has no tensor-parallel plan; use MLP or GPT"]
    return []


def _format_loc(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(config)"


def load_config(data: object) -> TrainerConfig:
    """Validate a spec dict; raise ConfigError listing every problem with its field path."""
    if not isinstance(data, dict):
        raise ConfigError("(config): must be a JSON object (the job's spec)")
    try:
        cfg = TrainerConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{_format_loc(e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("\n".join(lines)) from None
    problems = check_consistency(cfg)
    if problems:
        raise ConfigError("\n".join(problems))
    return cfg


def config_to_spec(cfg: TrainerConfig) -> dict[str, Any]:
    """The config as a camelCase spec dict (what DTJ_CONFIG holds)."""
    return cfg.model_dump(by_alias=True, mode="json", exclude_none=True)
