"""What the cross-field rules (rules.py) talk about, in both of their languages: `Facts`
derives each quantity from a parsed spec in Python, and the CEL constants below compute the
same quantity over the spec (`self`) inside the API server. Absent settings count with
their model defaults in both, so the two can never disagree about, say, the micro-batches
of a Pipeline job that sets no `strategy.pipeline`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtjob_api.aliases import (
    ALIASES,
    cel_resolved_mode,
    resolved_mode,
    resolved_type,
)
from dtjob_api.resource_names import DEFAULT_GPU_RESOURCE
from dtjob_api.spec import (
    DistributedTrainingJobSpec,
    HybridSpec,
    ModelSpec,
    ModelType,
    ParameterServerSpec,
    PipelineSchedule,
    PipelineSpec,
    RoleSpec,
    StrategyType,
    TensorParallelSpec,
    TrainerSpec,
)

# Strategies whose processes are workers, and those whose processes are pipeline stages.
WORKER_STRATEGIES = (
    StrategyType.DATA_PARALLEL,
    StrategyType.PARAMETER_SERVER,
    StrategyType.FSDP,
    StrategyType.CPU_OFFLOAD,
    StrategyType.AUTO,
    StrategyType.TENSOR_PARALLEL,
)
STAGE_STRATEGIES = (StrategyType.MODEL_PARALLEL, StrategyType.PIPELINE, StrategyType.HYBRID)
ONE_F_ONE_B = (PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED_1F1B)
# Blocks of the bundled trainer's models, the units pipeline stages split (an MLP has one
# per hidden layer plus the output layer; a GPT its transformer blocks plus the embedding and
# the head; the CNN is fixed).
CNN_BLOCKS = 4
GPT_EXTRA_BLOCKS = 2


@dataclass(frozen=True)
class Facts:
    """What the rules talk about, derived from a parsed spec with defaults applied."""

    strategy: str
    mode: str
    schedule: str
    microbatches: int
    stagesPerRank: int
    dataParallel: int
    hogwildProcesses: int
    batchSize: int
    has_worker: bool
    has_ps: bool
    has_stage: bool
    workerProcesses: int
    stageProcesses: int
    has_ps_settings: bool
    has_pipeline_settings: bool
    has_hybrid_settings: bool
    bundled_trainer: bool
    modelType: str
    datasetType: str
    modelBlocks: int
    dModel: int
    heads: int
    backoffSeconds: int
    maxBackoffSeconds: int
    psProcesses: int = 0
    declared: str = ""
    """strategy.type as written (an alias included); `strategy` is what runs."""
    tensorParallel: int = TensorParallelSpec().size
    has_tensor_parallel_settings: bool = False
    hiddenSizes: tuple[int, ...] = ()
    has_stage_groups: bool = False
    groupBlocks: int = 0
    """Model blocks the stage groups hold in all (0 unless every group sets blocks)."""
    has_cpu_group: bool = False
    backend: str = "auto"
    compile: bool = False
    activationCheckpointing: bool = False
    trainerFieldsSet: frozenset[str] = frozenset()
    """Optional trainer fields present, e.g. "model.factory" (trainer_rules.py)."""
    cpuRoles: str = ""
    """Roles whose pods get no GPU, as "worker, ps" (a stage role with groups counts by its
    groups, which a rule of their own checks)."""
    gpuResourceWithoutGpus: frozenset[str] = frozenset()
    """Roles that name a gpuResource other than the default and get no GPU."""
    exitCodesInBoth: str = ""
    """Exit codes listed both retryable and permanent, as "75, 76"."""
    codePath: str = ""
    """trainer.codePath as written ("" when unset)."""
    has_min_replicas: bool = False
    """roles.worker.minReplicas is set (an elastic job)."""
    minReplicas: int = 0
    workerReplicas: int = 0
    has_elastic_policy: bool = False
    """runPolicy.elastic is set."""

    @property
    def stageTensorParallel(self) -> int:
        """Tensor-parallel degree inside each pipeline stage: strategy.tensorParallel.size
        when it is set (Pipeline, Hybrid), else 1."""
        return self.tensorParallel if self.has_tensor_parallel_settings else 1

    @property
    def stageWidth(self) -> int:
        """Stage processes per pipeline stage: dataParallel (Hybrid only) x the stage
        tensor-parallel degree."""
        dp = self.dataParallel if self.strategy == StrategyType.HYBRID else 1
        return dp * self.stageTensorParallel

    @property
    def pipelineDegree(self) -> int:
        """Pipeline ranks: the stage processes divided by the stage width (dataParallel
        for Hybrid, times strategy.tensorParallel.size when set)."""
        return self.stageProcesses // self.stageWidth

    @property
    def pipelineStages(self) -> int:
        """Model pieces the pipeline needs: ranks x chunks per rank (Interleaved1F1B)."""
        chunks = self.stagesPerRank if self.schedule == PipelineSchedule.INTERLEAVED_1F1B else 1
        return self.pipelineDegree * chunks

    @property
    def hogwildParts(self) -> int:
        """Hogwild processes of the job, over which every global batch is split."""
        return self.workerProcesses * self.hogwildProcesses

    @classmethod
    def of(cls, spec: DistributedTrainingJobSpec) -> Facts:
        """Facts of a spec; absent settings count with their model defaults, as in CEL."""
        strategy, roles, trainer = spec.strategy, spec.roles, spec.trainer
        ps = strategy.parameterServer or ParameterServerSpec()
        pipeline = strategy.pipeline or PipelineSpec()
        groups = (roles.stage.groups if roles.stage else None) or []
        return cls(
            # An alias counts as its target (aliases.py): the rules hold it to the same roles.
            strategy=str(resolved_type(strategy.type)),
            mode=str(resolved_mode(strategy)),
            schedule=str(pipeline.schedule),
            microbatches=pipeline.microbatches,
            stagesPerRank=pipeline.stagesPerRank,
            dataParallel=(strategy.hybrid or HybridSpec()).dataParallel,
            hogwildProcesses=ps.hogwildProcesses,
            batchSize=trainer.batchSize,
            has_worker=roles.worker is not None,
            has_ps=roles.ps is not None,
            has_stage=roles.stage is not None,
            workerProcesses=_processes(roles.worker),
            stageProcesses=_processes(roles.stage),
            has_ps_settings=strategy.parameterServer is not None,
            has_pipeline_settings=strategy.pipeline is not None,
            has_hybrid_settings=strategy.hybrid is not None,
            bundled_trainer=trainer.command is None,
            modelType=str(trainer.model.type),
            datasetType=str(trainer.dataset.type),
            modelBlocks=_blocks(trainer.model),
            dModel=trainer.model.dModel,
            heads=trainer.model.heads,
            backoffSeconds=spec.runPolicy.backoffSeconds,
            maxBackoffSeconds=spec.runPolicy.maxBackoffSeconds,
            psProcesses=_processes(roles.ps),
            declared=str(strategy.type),
            tensorParallel=(strategy.tensorParallel or TensorParallelSpec()).size,
            has_tensor_parallel_settings=strategy.tensorParallel is not None,
            hiddenSizes=tuple(trainer.model.hiddenSizes),
            has_stage_groups=bool(groups),
            groupBlocks=sum((g.blocks or 0) * g.replicas for g in groups)
            if all(g.blocks for g in groups)
            else 0,
            has_cpu_group=any(g.gpus == 0 for g in groups),
            backend=str(strategy.backend),
            compile=trainer.compile,
            activationCheckpointing=trainer.activationCheckpointing,
            trainerFieldsSet=_fields_set(trainer),
            cpuRoles=", ".join(r for r, gpus in _role_gpus(spec).items() if not gpus),
            gpuResourceWithoutGpus=frozenset(
                r
                for r, gpus in _role_gpus(spec).items()
                if not gpus and getattr(roles, r).gpuResource != DEFAULT_GPU_RESOURCE
            ),
            exitCodesInBoth=", ".join(
                str(c)
                for c in sorted(
                    set(spec.runPolicy.retryableExitCodes or ())
                    & set(spec.runPolicy.permanentExitCodes or ())
                )
            ),
            codePath=trainer.codePath or "",
            has_min_replicas=roles.worker is not None and roles.worker.minReplicas is not None,
            minReplicas=(roles.worker.minReplicas or 0) if roles.worker else 0,
            workerReplicas=roles.worker.replicas if roles.worker else 0,
            has_elastic_policy=spec.runPolicy.elastic is not None,
        )


def _processes(role: RoleSpec | None) -> int:
    return role.processes() * role.replicas if role else 0


def _role_gpus(spec: DistributedTrainingJobSpec) -> dict[str, bool]:
    """Each role present: whether its pods get a GPU (a stage role with groups: whether
    any group does)."""
    out = {}
    for name in ("worker", "ps", "stage"):
        role = getattr(spec.roles, name)
        if role is not None:
            groups = getattr(role, "groups", None) or []
            out[name] = role.gpus > 0 or any(g.gpus > 0 for g in groups)
    return out


# Optional model and dataset fields whose presence a rule talks about (no default: CEL's
# has() sees them only when the manifest sets them).
_OPTIONAL_TRAINER_FIELDS = (
    "factory", "kwargs", "path", "testPath", "dtype", "imageSize", "inputColumn", "targetColumn",
)  # fmt: skip


def _fields_set(trainer: TrainerSpec) -> frozenset[str]:
    """The optional model and dataset fields that a spec sets, as "model.factory"."""
    return frozenset(
        f"{part}.{name}"
        for part, spec in (("model", trainer.model), ("dataset", trainer.dataset))
        for name in _OPTIONAL_TRAINER_FIELDS
        if getattr(spec, name, None) is not None
    )


def _blocks(model: ModelSpec) -> int:
    if model.type == ModelType.MLP:
        return len(model.hiddenSizes) + 1
    if model.type == ModelType.CNN:
        return CNN_BLOCKS
    return model.layers + GPT_EXTRA_BLOCKS


# --- The same facts in CEL (self = spec). gpus and replicas always exist: the API server
# fills in their schema defaults before it evaluates the rules.
def cel_list(values: tuple[str, ...]) -> str:
    """A CEL list of string literals."""
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def _cel_processes(role: str) -> str:
    r = f"self.roles.{role}"
    per_pod = f"(has({r}.procsPerPod) ? {r}.procsPerPod : ({r}.gpus > 0 ? {r}.gpus : 1))"
    return f"({per_pod} * {r}.replicas)"


def _cel_setting(block: str, field: str, default: object) -> str:
    value = f'"{default}"' if isinstance(default, str) else str(default)
    return f"(has(self.strategy.{block}) ? self.strategy.{block}.{field} : {value})"


# strategy.type as written: compare it with cel_is() wherever a tf.distribute alias
# (aliases.py) may stand for the strategy (no alias stands for Pipeline, Hybrid or
# ModelParallel, so `STRATEGY == "Hybrid"` is exact).
STRATEGY = "self.strategy.type"
# The parameter-server mode that runs (ParameterServerStrategy: Async).
MODE = cel_resolved_mode(
    STRATEGY, _cel_setting("parameterServer", "mode", str(ParameterServerSpec().mode))
)


def cel_is(*strategies: StrategyType) -> str:
    """CEL: the job runs one of `strategies`, written as itself or as an alias of it."""
    names = [s.value for s in strategies]
    names += [a.value for a, target in ALIASES.items() if target in strategies]
    return f"{STRATEGY} in {cel_list(tuple(names))}"


HOGWILD_PROCESSES = _cel_setting(
    "parameterServer", "hogwildProcesses", ParameterServerSpec().hogwildProcesses
)
SCHEDULE = _cel_setting("pipeline", "schedule", str(PipelineSpec().schedule))
MICROBATCHES = _cel_setting("pipeline", "microbatches", PipelineSpec().microbatches)
STAGES_PER_RANK = _cel_setting("pipeline", "stagesPerRank", PipelineSpec().stagesPerRank)
DATA_PARALLEL = _cel_setting("hybrid", "dataParallel", HybridSpec().dataParallel)
TENSOR_PARALLEL = _cel_setting("tensorParallel", "size", TensorParallelSpec().size)
WORKER_PROCESSES = _cel_processes("worker")
STAGE_PROCESSES = _cel_processes("stage")
PS_PROCESSES = _cel_processes("ps")
# Tensor parallelism inside pipeline stages: absent settings mean none (the 2 of
# TENSOR_PARALLEL is the TensorParallel strategy's default size).
STAGE_TENSOR_PARALLEL = (
    "(has(self.strategy.tensorParallel) ? self.strategy.tensorParallel.size : 1)"
)
STAGE_WIDTH = f'(({STRATEGY} == "Hybrid" ? {DATA_PARALLEL} : 1) * {STAGE_TENSOR_PARALLEL})'
PIPELINE_DEGREE = f"({STAGE_PROCESSES} / {STAGE_WIDTH})"
_CHUNKS = f'({SCHEDULE} == "Interleaved1F1B" ? {STAGES_PER_RANK} : 1)'
PIPELINE_STAGES = f"({PIPELINE_DEGREE} * {_CHUNKS})"
_MODEL = "self.trainer.model"
MODEL_BLOCKS = (
    f'({_MODEL}.type == "MLP" ? {_MODEL}.hiddenSizes.size() + 1 : '
    f'({_MODEL}.type == "CNN" ? {CNN_BLOCKS} : {_MODEL}.layers + {GPT_EXTRA_BLOCKS}))'
)
# Without a command the container runs `python -m dtjob_trainer run` (whatever the image):
# the bundled trainer, whose own rules then apply (rules.py).
BUNDLED_TRAINER = "!has(self.trainer.command)"
# The stage role's groups (a heterogeneous pipeline: spec.py StageGroupSpec).
STAGE_GROUPS = "self.roles.stage.groups"
HAS_STAGE_GROUPS = f"has(self.roles.stage) && has({STAGE_GROUPS})"
GROUP_BLOCKS = f"{STAGE_GROUPS}.map(g, g.blocks * g.replicas).sum()"
# Pipeline and Hybrid jobs with their stage role: the stages' pipeline (rules.py and
# tensor_parallel_rules.py both ask it).
PIPELINED = f"{cel_is(StrategyType.PIPELINE, StrategyType.HYBRID)} && has(self.roles.stage)"


def pipelined(f: Facts) -> bool:
    """Python twin of PIPELINED."""
    return f.strategy in (StrategyType.PIPELINE, StrategyType.HYBRID) and f.has_stage
