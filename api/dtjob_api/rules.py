"""Cross-field rules of the spec, written once and enforced twice: as CEL rules in the CRD
(x-kubernetes-validations, so `kubectl apply` refuses a bad manifest) and in Python by
validation.validate_job (the operator's backstop where the CRD lacks them).

Rules about the shape of the gang (which roles a strategy needs, Hybrid's grid) hold for
every job: the env contract is built from them. Rules about what the bundled trainer does
with the spec (batch splits, micro-batch schedules, model blocks, model/data pairs) apply
only when it runs, i.e. when `trainer.command` is unset (BUNDLED_TRAINER): without a command
the container runs `python -m dtjob_trainer run`, whatever the image, and with one the
trainer settings are only passed on in the job config for the custom code to use or ignore.

Each rule is a row of RULES: WHEN it applies and what it REQUIRES, each in CEL over the spec
(`self`) and in Python over its Facts (facts.py), the field it is about and a message. The
message is the same for the API server and the operator; the operator adds the numbers
behind it (`detail`), which CEL messages cannot carry (rule.py: Rule, PLACEHOLDERS).
"""

from __future__ import annotations

from dtjob_api.contradiction_rules import CONTRADICTION_RULES
from dtjob_api.elastic_rules import ELASTIC_RULES
from dtjob_api.facts import (
    BUNDLED_TRAINER,
    DATA_PARALLEL,
    GROUP_BLOCKS,
    HAS_STAGE_GROUPS,
    HOGWILD_PROCESSES,
    MICROBATCHES,
    MODE,
    MODEL_BLOCKS,
    ONE_F_ONE_B,
    PIPELINE_DEGREE,
    PIPELINE_STAGES,
    PIPELINED,
    PS_PROCESSES,
    SCHEDULE,
    STAGE_GROUPS,
    STAGE_PROCESSES,
    STAGE_STRATEGIES,
    STAGE_WIDTH,
    STRATEGY,
    WORKER_PROCESSES,
    WORKER_STRATEGIES,
    Facts,
    cel_is,
    cel_list,
    pipelined,
)
from dtjob_api.rule import Rule
from dtjob_api.spec import StrategyType
from dtjob_api.speed_rules import SPEED_RULES
from dtjob_api.tensor_parallel_rules import TENSOR_PARALLEL_RULES
from dtjob_api.trainer_rules import TRAINER_RULES

# metadata.name: `<name>-worker-<index>` (index < 4096, so 4 digits) is a pod hostname and
# must fit a 63-character DNS label; the name itself names a Service, a DNS-1035 label.
MAX_NAME_LENGTH = 45
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# Spec fields that may change after creation; everything else is fixed once the job exists
# (a running gang cannot change shape, and a restart must resume the same training).
MUTABLE_SPEC_FIELDS = frozenset({"suspend"})
# The stall watch's settings too: they shape no pod, and a user whose job is declared stalled
# wrongly must be able to loosen them without losing the run.
MUTABLE_RUN_POLICY_FIELDS = frozenset(
    {"ttlSecondsAfterFinished", "activeDeadlineSeconds", "progressDeadlineSeconds", "stallPolicy"}
)
IMMUTABLE_MESSAGE = "is immutable after creation; delete and re-create the job to change it"


def _is(*strategies: StrategyType) -> str:
    return cel_is(*strategies)


# Conditions several rules share, in CEL and Python.
_PS = _is(StrategyType.PARAMETER_SERVER)
_HOGWILD = f'{_PS} && {MODE} == "Hogwild"'
# The (pp, dp, tp) grid of the stage processes exists only when the stage width (Hybrid's
# dataParallel x strategy.tensorParallel.size) divides them (else a rule fires and the
# pipeline degree means nothing).
_GRID = f"{PIPELINED} && {STAGE_PROCESSES} % {STAGE_WIDTH} == 0"
_1F1B = f"{SCHEDULE} in {cel_list(tuple(str(s) for s in ONE_F_ONE_B))}"
_HYBRID = f'{STRATEGY} == "Hybrid" && has(self.roles.stage)'
# Every worker strategy splits the global batch over the worker processes; Hogwild splits it
# further over the processes inside each pod.
# (TensorParallel splits it over the data-parallel groups only: a rule of its own.)
_BATCH_SPLIT = tuple(s for s in WORKER_STRATEGIES if s != StrategyType.TENSOR_PARALLEL)
# These weight each rank's loss by its share of the batch (trainer strategies/common.py), so
# a batch that does not divide trains the same model; each process needs one sample. The
# others split evenly (local steps, Hogwild's threads, Auto's own choice).
_UNEVEN_SPLIT = (StrategyType.DATA_PARALLEL, StrategyType.FSDP, StrategyType.CPU_OFFLOAD)
_EVEN_SPLIT = tuple(s for s in _BATCH_SPLIT if s not in _UNEVEN_SPLIT)
_DATA_PARALLEL = f"{_is(*_EVEN_SPLIT)} && !({_HOGWILD}) && has(self.roles.worker)"
_UNEVEN = f"{_is(*_UNEVEN_SPLIT)} && has(self.roles.worker)"


# A Custom model's blocks are known only once its factory runs (the trainer counts them).
_NOT_CUSTOM = 'self.trainer.model.type != "Custom"'
# The data sets each bundled model reads (MLP and CNN: Digits).
_DATA_OF_MODEL = {"GPT": ("SyntheticTokens", "TokenFile")}

# ParameterServer mode EASGDRoundRobin: workers take turns at one master's centre.
_ROUND_ROBIN = f'{_PS} && {MODE} == "EASGDRoundRobin"'
_PS_ALIAS = StrategyType.PARAMETER_SERVER_STRATEGY.value


def _round_robin(f: Facts) -> bool:
    return f.strategy == StrategyType.PARAMETER_SERVER and f.mode == "EASGDRoundRobin"


def _hogwild(f: Facts) -> bool:
    return f.strategy == StrategyType.PARAMETER_SERVER and f.mode == "Hogwild"


def _grid(f: Facts) -> bool:
    return pipelined(f) and f.stageProcesses % f.stageWidth == 0


def _interleaved_rounds_ok(f: Facts) -> bool:
    # torch's ScheduleInterleaved1F1B runs max(1, microbatches // ranks) rounds and needs
    # the micro-batches to split evenly over them.
    return f.microbatches % max(1, f.microbatches // max(1, f.pipelineDegree)) == 0


RULES: tuple[Rule, ...] = (
    Rule(
        "roles.worker",
        _is(*WORKER_STRATEGIES), lambda f: f.strategy in WORKER_STRATEGIES,
        "has(self.roles.worker)", lambda f: f.has_worker,
        "required for strategy {strategy}: its training processes run in the worker pods",
        "FieldValueRequired",
    ),
    *ELASTIC_RULES,
    Rule(
        "roles.stage",
        _is(*WORKER_STRATEGIES), lambda f: f.strategy in WORKER_STRATEGIES,
        "!has(self.roles.stage)", lambda f: not f.has_stage,
        "not allowed with strategy {strategy}: stages belong to ModelParallel, Pipeline and "
        "Hybrid; use roles.worker",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.stage",
        _is(*STAGE_STRATEGIES), lambda f: f.strategy in STAGE_STRATEGIES,
        "has(self.roles.stage)", lambda f: f.has_stage,
        "required for strategy {strategy}: its model is split over the stage pods",
        "FieldValueRequired",
    ),
    Rule(
        "roles.worker",
        _is(*STAGE_STRATEGIES), lambda f: f.strategy in STAGE_STRATEGIES,
        "!has(self.roles.worker)", lambda f: not f.has_worker,
        "not allowed with strategy {strategy}: its processes are pipeline stages; "
        "use roles.stage",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.ps",
        f"!({_PS})", lambda f: f.strategy != StrategyType.PARAMETER_SERVER,
        "!has(self.roles.ps)", lambda f: not f.has_ps,
        "only allowed with strategy ParameterServer, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.ps",
        f'{_PS} && ({MODE} == "Async" || ({_HOGWILD} && has(self.roles.worker) && '
        f"{WORKER_PROCESSES} > 1))",
        lambda f: f.strategy == StrategyType.PARAMETER_SERVER
        and (f.mode == "Async" or (f.mode == "Hogwild" and f.workerProcesses > 1)),
        "has(self.roles.ps)", lambda f: f.has_ps,
        "required for strategy ParameterServer in mode {mode} (Async always, Hogwild with "
        "more than one worker process; EASGD without ps runs its synchronous form): the "
        "parameter servers hold the model",
        "FieldValueRequired",
    ),
    Rule(
        "strategy.parameterServer",
        "has(self.strategy.parameterServer)", lambda f: f.has_ps_settings,
        _PS, lambda f: f.strategy == StrategyType.PARAMETER_SERVER,
        "only allowed with strategy ParameterServer, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "strategy.pipeline",
        "has(self.strategy.pipeline)", lambda f: f.has_pipeline_settings,
        _is(StrategyType.PIPELINE, StrategyType.HYBRID),
        lambda f: f.strategy in (StrategyType.PIPELINE, StrategyType.HYBRID),
        "only allowed with strategy Pipeline or Hybrid, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "strategy.hybrid",
        "has(self.strategy.hybrid)", lambda f: f.has_hybrid_settings,
        f'{STRATEGY} == "Hybrid"', lambda f: f.strategy == StrategyType.HYBRID,
        "only allowed with strategy Hybrid, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.stage",
        f'{STRATEGY} == "ModelParallel" && has(self.roles.stage)',
        lambda f: f.strategy == StrategyType.MODEL_PARALLEL and f.has_stage,
        f"{STAGE_PROCESSES} >= 2", lambda f: f.stageProcesses >= 2,
        "strategy ModelParallel needs at least 2 stage processes (replicas x procsPerPod)",
        detail="got {stageProcesses}",
    ),
    Rule(
        "strategy.hybrid.dataParallel",
        _HYBRID, lambda f: f.strategy == StrategyType.HYBRID and f.has_stage,
        f"{STAGE_PROCESSES} % {DATA_PARALLEL} == 0",
        lambda f: f.stageProcesses % f.dataParallel == 0,
        "must divide the stage processes (replicas x procsPerPod) evenly",
        detail="{stageProcesses} stage processes, dataParallel {dataParallel}",
    ),
    Rule(
        "roles.stage",
        f'{_GRID} && {STRATEGY} == "Hybrid"',
        lambda f: _grid(f) and f.strategy == StrategyType.HYBRID,
        f"{PIPELINE_DEGREE} >= 2", lambda f: f.pipelineDegree >= 2,
        "strategy Hybrid needs a pipeline degree (stage processes / "
        "strategy.hybrid.dataParallel, / strategy.tensorParallel.size when set) of at least 2",
        detail="{stageProcesses} stage processes / {stageWidth} = {pipelineDegree}",
    ),
    Rule(
        "strategy.pipeline.microbatches",
        f"{BUNDLED_TRAINER} && {_GRID} && {_1F1B}",
        lambda f: f.bundled_trainer and _grid(f) and f.schedule in ONE_F_ONE_B,
        f"{MICROBATCHES} >= {PIPELINE_DEGREE}", lambda f: f.microbatches >= f.pipelineDegree,
        "schedule {schedule} needs at least as many micro-batches as pipeline ranks (the stage "
        "processes; for Hybrid divided by strategy.hybrid.dataParallel; divided by "
        "strategy.tensorParallel.size when set)",
        detail="{microbatches} micro-batches, {pipelineDegree} pipeline ranks",
    ),
    Rule(
        "strategy.pipeline.microbatches",
        f'{BUNDLED_TRAINER} && {_GRID} && {SCHEDULE} == "Interleaved1F1B" && '
        f"{MICROBATCHES} >= {PIPELINE_DEGREE}",
        lambda f: f.bundled_trainer
        and _grid(f)
        and f.schedule == "Interleaved1F1B"
        and f.microbatches >= f.pipelineDegree,
        f"{MICROBATCHES} % ({MICROBATCHES} / {PIPELINE_DEGREE}) == 0", _interleaved_rounds_ok,
        "schedule Interleaved1F1B needs the micro-batches to be a multiple of the rounds "
        "(micro-batches / pipeline ranks, rounded down); a multiple of the ranks always works",
        detail="{microbatches} micro-batches, {pipelineDegree} pipeline ranks",
    ),
    Rule(
        "strategy.pipeline.microbatches",
        f'{BUNDLED_TRAINER} && {_GRID} && {SCHEDULE} == "PipeDream2BW"',
        lambda f: f.bundled_trainer and _grid(f) and f.schedule == "PipeDream2BW",
        f"{MICROBATCHES} >= {PIPELINE_DEGREE}", lambda f: f.microbatches >= f.pipelineDegree,
        "schedule PipeDream2BW needs at least as many micro-batches as pipeline stages (the "
        "stage processes): two weight buffers suffice only when a step fills the pipeline",
        detail="{microbatches} micro-batches, {pipelineDegree} pipeline ranks",
    ),
    Rule(
        "strategy.pipeline.schedule",
        f"{BUNDLED_TRAINER} && {_HYBRID}",
        lambda f: f.bundled_trainer and f.strategy == StrategyType.HYBRID and f.has_stage,
        f'!({SCHEDULE} in ["PipeDream", "PipeDream2BW"])',
        lambda f: f.schedule not in ("PipeDream", "PipeDream2BW"),
        "schedule {schedule} runs with strategy Pipeline only; Hybrid takes GPipe, 1F1B or "
        "Interleaved1F1B",
    ),
    Rule(
        "roles.stage",
        f"{BUNDLED_TRAINER} && {_NOT_CUSTOM} && {_is(*STAGE_STRATEGIES)} && "
        f"has(self.roles.stage) && {STAGE_PROCESSES} % {STAGE_WIDTH} == 0",
        lambda f: f.bundled_trainer
        and f.modelType != "Custom"
        and f.strategy in STAGE_STRATEGIES
        and f.has_stage
        and f.stageProcesses % f.stageWidth == 0,
        f"{MODEL_BLOCKS} >= {PIPELINE_STAGES}", lambda f: f.modelBlocks >= f.pipelineStages,
        "more pipeline stages than the model has blocks: add layers "
        "(trainer.model.hiddenSizes or trainer.model.layers) or use fewer stage processes",
        detail="{pipelineStages} stages, {modelBlocks} blocks",
    ),
    Rule(
        "trainer.batchSize",
        f'{BUNDLED_TRAINER} && {STRATEGY} == "Pipeline"',
        lambda f: f.bundled_trainer and f.strategy == StrategyType.PIPELINE,
        f"self.trainer.batchSize % {MICROBATCHES} == 0",
        lambda f: f.batchSize % f.microbatches == 0,
        "must be divisible by strategy.pipeline.microbatches",
        detail="{batchSize} is not a multiple of {microbatches}",
    ),
    Rule(
        "trainer.batchSize",
        f"{BUNDLED_TRAINER} && {_HYBRID}",
        lambda f: f.bundled_trainer and f.strategy == StrategyType.HYBRID and f.has_stage,
        f"self.trainer.batchSize % ({DATA_PARALLEL} * {MICROBATCHES}) == 0",
        lambda f: f.batchSize % (f.dataParallel * f.microbatches) == 0,
        "must be divisible by strategy.hybrid.dataParallel x strategy.pipeline.microbatches",
        detail="{batchSize} is not a multiple of {dataParallel} x {microbatches}",
    ),
    Rule(
        "trainer.batchSize",
        f"{BUNDLED_TRAINER} && {_DATA_PARALLEL}",
        lambda f: f.bundled_trainer
        and f.strategy in _EVEN_SPLIT
        and not _hogwild(f)
        and f.has_worker,
        f"self.trainer.batchSize % {WORKER_PROCESSES} == 0",
        lambda f: f.batchSize % f.workerProcesses == 0,
        "must be divisible by the worker processes (replicas x procsPerPod): every global "
        "batch is split evenly over them",
        detail="{batchSize} is not a multiple of {workerProcesses}",
    ),
    Rule(
        "trainer.batchSize",
        f"{BUNDLED_TRAINER} && {_UNEVEN}",
        lambda f: f.bundled_trainer and f.strategy in _UNEVEN_SPLIT and f.has_worker,
        f"self.trainer.batchSize >= {WORKER_PROCESSES}",
        lambda f: f.batchSize >= f.workerProcesses,
        "must be at least the worker processes (replicas x procsPerPod): every process "
        "trains on its share of each global batch",
        detail="{batchSize} is less than {workerProcesses}",
    ),
    Rule(
        "trainer.batchSize",
        f"{BUNDLED_TRAINER} && {_HOGWILD} && has(self.roles.worker)",
        lambda f: f.bundled_trainer and _hogwild(f) and f.has_worker,
        f"self.trainer.batchSize % ({WORKER_PROCESSES} * {HOGWILD_PROCESSES}) == 0",
        lambda f: f.batchSize % f.hogwildParts == 0,
        "must be divisible by the Hogwild processes (worker processes x "
        "strategy.parameterServer.hogwildProcesses): every global batch is split over them",
        detail="{batchSize} is not a multiple of {hogwildParts}",
    ),
    Rule(
        "trainer.dataset.type",
        f'{BUNDLED_TRAINER} && self.trainer.model.type != "Custom" && '
        '!(self.trainer.dataset.type in ["HFDisk", "Custom"])',
        lambda f: f.bundled_trainer
        and f.modelType != "Custom"
        and f.datasetType not in ("HFDisk", "Custom"),
        'self.trainer.dataset.type in (self.trainer.model.type == "GPT" ? '
        '["SyntheticTokens", "TokenFile"] : ["Digits"])',
        lambda f: f.datasetType in _DATA_OF_MODEL.get(f.modelType, ("Digits",)),
        "does not fit the model: GPT trains on SyntheticTokens or TokenFile, MLP and CNN on "
        "Digits, a Custom model on any data; HFDisk and Custom data fit any model",
        detail="model {modelType}, dataset {datasetType}",
    ),
    Rule(
        "trainer.model.dModel",
        f'{BUNDLED_TRAINER} && self.trainer.model.type == "GPT"',
        lambda f: f.bundled_trainer and f.modelType == "GPT",
        "self.trainer.model.dModel % self.trainer.model.heads == 0",
        lambda f: f.dModel % f.heads == 0,
        "must be a multiple of trainer.model.heads",
        detail="{dModel} is not a multiple of {heads}",
    ),
    # ParameterServer mode EASGDRoundRobin: the centre lives with one master (the ps
    # process) that serves the workers in turn.
    Rule(
        "roles.ps",
        _ROUND_ROBIN, _round_robin,
        "has(self.roles.ps)", lambda f: f.has_ps,
        "required for strategy ParameterServer in mode EASGDRoundRobin: its one ps process "
        "is the master that holds the centre",
        "FieldValueRequired",
    ),
    Rule(
        "roles.ps",
        f"{_ROUND_ROBIN} && has(self.roles.ps)", lambda f: _round_robin(f) and f.has_ps,
        f"{PS_PROCESSES} == 1", lambda f: f.psProcesses == 1,
        "mode EASGDRoundRobin keeps the centre on one master: exactly 1 ps process "
        "(replicas x procsPerPod)",
        detail="got {psProcesses}",
    ),
    Rule(
        "roles.worker",
        f"{_ROUND_ROBIN} && has(self.roles.worker)", lambda f: _round_robin(f) and f.has_worker,
        f"{WORKER_PROCESSES} >= 2", lambda f: f.workerProcesses >= 2,
        "mode EASGDRoundRobin needs at least 2 worker processes (replicas x procsPerPod) to "
        "take turns at the centre; with one, use mode EASGD",
        detail="got {workerProcesses}",
    ),
    # tf.distribute aliases (aliases.py): every other rule sees their target already.
    Rule(
        "strategy.parameterServer",
        f'{STRATEGY} == "{_PS_ALIAS}"', lambda f: f.declared == _PS_ALIAS,
        "!has(self.strategy.parameterServer)", lambda f: not f.has_ps_settings,
        f"not allowed with strategy {_PS_ALIAS}: it is ParameterServer in mode Async, which "
        "has no settings; use strategy.type ParameterServer to choose another mode",
        "FieldValueForbidden",
    ),
    *TENSOR_PARALLEL_RULES,
    # Heterogeneous pipelines: roles.stage.groups (the role's own rules are in spec.py).
    Rule(
        "roles.stage.groups",
        HAS_STAGE_GROUPS, lambda f: f.has_stage_groups,
        _is(StrategyType.PIPELINE, StrategyType.MODEL_PARALLEL),
        lambda f: f.strategy in (StrategyType.PIPELINE, StrategyType.MODEL_PARALLEL),
        "only allowed with strategy Pipeline or ModelParallel, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.stage.groups",
        f'{HAS_STAGE_GROUPS} && {STRATEGY} == "Pipeline"',
        lambda f: f.has_stage_groups and f.strategy == StrategyType.PIPELINE,
        f'{SCHEDULE} != "Interleaved1F1B"', lambda f: f.schedule != "Interleaved1F1B",
        "cannot run schedule Interleaved1F1B (a stage pod holds one stage): use GPipe, "
        "1F1B, PipeDream or PipeDream2BW",
    ),
    Rule(
        "roles.stage.groups",
        f"{BUNDLED_TRAINER} && {_NOT_CUSTOM} && {HAS_STAGE_GROUPS} && "
        f"{STAGE_GROUPS}.all(g, has(g.blocks))",
        lambda f: f.bundled_trainer and f.modelType != "Custom" and f.groupBlocks > 0,
        f"{GROUP_BLOCKS} == {MODEL_BLOCKS}", lambda f: f.groupBlocks == f.modelBlocks,
        "blocks x replicas over the groups must add up to the model's blocks",
        detail="{groupBlocks} != {modelBlocks}",
    ),
    Rule(
        "strategy.backend",
        f"{HAS_STAGE_GROUPS} && {STAGE_GROUPS}.exists(g, g.gpus == 0)",
        lambda f: f.has_stage_groups and f.has_cpu_group,
        'self.strategy.backend != "nccl"', lambda f: f.backend != "nccl",
        "nccl cannot reach the ranks of CPU stage groups: use gloo or auto",
    ),
    Rule(
        "runPolicy.maxBackoffSeconds",
        "true", lambda f: True,
        "self.runPolicy.maxBackoffSeconds >= self.runPolicy.backoffSeconds",
        lambda f: f.maxBackoffSeconds >= f.backoffSeconds,
        "must be at least runPolicy.backoffSeconds",
        detail="{maxBackoffSeconds} < {backoffSeconds}",
    ),
    *TRAINER_RULES,
    *SPEED_RULES,
    *CONTRADICTION_RULES,
)  # fmt: skip
