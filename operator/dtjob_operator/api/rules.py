"""Cross-field rules of the spec, written once and enforced twice: as CEL rules in the CRD
(x-kubernetes-validations, so `kubectl apply` refuses a bad manifest) and in Python by
validation.validate_job (the operator's backstop where the CRD lacks them).

Each rule is a row of RULES: the CEL expression over the spec (`self`), its Python twin
over the parsed spec, the field it is about and a message template. Placeholders such as
{strategy} name a FACT, which also has a CEL and a Python form, so the API server and the
operator word every refusal the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from dtjob_operator.api.spec import (
    DistributedTrainingJobSpec,
    HybridSpec,
    ParameterServerSpec,
    PipelineSchedule,
    PipelineSpec,
    PSMode,
    RoleSpec,
    StrategyType,
)

# metadata.name: `<name>-worker-<index>` (index < 4096, so 4 digits) is a pod hostname and
# must fit a 63-character DNS label; the name itself names a Service, a DNS-1035 label.
MAX_NAME_LENGTH = 45
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# Strategies whose processes are workers, and those whose processes are pipeline stages.
WORKER_STRATEGIES = (
    StrategyType.DATA_PARALLEL,
    StrategyType.PARAMETER_SERVER,
    StrategyType.FSDP,
    StrategyType.CPU_OFFLOAD,
    StrategyType.AUTO,
)
STAGE_STRATEGIES = (StrategyType.MODEL_PARALLEL, StrategyType.PIPELINE, StrategyType.HYBRID)
# Strategies that split every global batch evenly over the worker processes (Auto picks one
# of DataParallel, FSDP and CPUOffload; ParameterServer only in mode Sync).
DATA_PARALLEL_STRATEGIES = (
    StrategyType.DATA_PARALLEL,
    StrategyType.FSDP,
    StrategyType.CPU_OFFLOAD,
    StrategyType.AUTO,
)
ONE_F_ONE_B = (PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED_1F1B)


@dataclass(frozen=True)
class Facts:
    """What the rules talk about, derived from a parsed spec with defaults applied."""

    strategy: str
    mode: str
    schedule: str
    microbatches: int
    dataParallel: int
    batchSize: int
    has_worker: bool
    has_ps: bool
    has_stage: bool
    workerReplicas: int
    workerProcesses: int
    stageProcesses: int
    has_ps_settings: bool
    has_pipeline_settings: bool
    has_hybrid_settings: bool
    backoffSeconds: int
    maxBackoffSeconds: int

    @property
    def pipelineDegree(self) -> int:
        """Pipeline stages of the Hybrid process grid (stage processes / dataParallel)."""
        return self.stageProcesses // self.dataParallel

    @classmethod
    def of(cls, spec: DistributedTrainingJobSpec) -> Facts:
        """Facts of a spec; absent settings count with their model defaults, as in CEL."""
        strategy = spec.strategy
        roles = spec.roles
        return cls(
            strategy=str(strategy.type),
            mode=str((strategy.parameterServer or ParameterServerSpec()).mode),
            schedule=str((strategy.pipeline or PipelineSpec()).schedule),
            microbatches=(strategy.pipeline or PipelineSpec()).microbatches,
            dataParallel=(strategy.hybrid or HybridSpec()).dataParallel,
            batchSize=spec.trainer.batchSize,
            has_worker=roles.worker is not None,
            has_ps=roles.ps is not None,
            has_stage=roles.stage is not None,
            workerReplicas=roles.worker.replicas if roles.worker else 0,
            workerProcesses=_processes(roles.worker),
            stageProcesses=_processes(roles.stage),
            has_ps_settings=strategy.parameterServer is not None,
            has_pipeline_settings=strategy.pipeline is not None,
            has_hybrid_settings=strategy.hybrid is not None,
            backoffSeconds=spec.runPolicy.backoffSeconds,
            maxBackoffSeconds=spec.runPolicy.maxBackoffSeconds,
        )


def _processes(role: RoleSpec | None) -> int:
    return role.processes() * role.replicas if role else 0


# --- CEL building blocks (self = spec). gpus and replicas always exist: the API server
# fills in their schema defaults before it evaluates the rules.
def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def _cel_processes(role: str) -> str:
    r = f"self.roles.{role}"
    per_pod = f"(has({r}.procsPerPod) ? {r}.procsPerPod : ({r}.gpus > 0 ? {r}.gpus : 1))"
    return f"({per_pod} * {r}.replicas)"


def _cel_setting(block: str, field: str, default: object) -> str:
    value = f'"{default}"' if isinstance(default, str) else str(default)
    return f"(has(self.strategy.{block}) ? self.strategy.{block}.{field} : {value})"


STRATEGY = "self.strategy.type"
MODE = _cel_setting("parameterServer", "mode", str(ParameterServerSpec().mode))
SCHEDULE = _cel_setting("pipeline", "schedule", str(PipelineSpec().schedule))
MICROBATCHES = _cel_setting("pipeline", "microbatches", PipelineSpec().microbatches)
DATA_PARALLEL = _cel_setting("hybrid", "dataParallel", HybridSpec().dataParallel)
WORKER_PROCESSES = _cel_processes("worker")
STAGE_PROCESSES = _cel_processes("stage")
PIPELINE_DEGREE = f"({STAGE_PROCESSES} / {DATA_PARALLEL})"

# Placeholders a message may use -> (CEL string expression, words for the API server's
# fallback). Only enum-valued ones: the server's cost estimate of `"..." + string(int)`
# is unbounded and it refuses the CRD, so numbers go into a rule's Python-only `detail`.
PLACEHOLDERS: dict[str, tuple[str, str]] = {
    "strategy": (STRATEGY, "<spec.strategy.type>"),
    "mode": (MODE, "<spec.strategy.parameterServer.mode>"),
    "schedule": (SCHEDULE, "<spec.strategy.pipeline.schedule>"),
}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: valid when `cel` (and `check`) hold."""

    field: str
    """Path under spec the rule is about, e.g. "roles.worker" (the CEL fieldPath)."""
    cel: str
    """CEL over the spec (self); true when the spec is valid."""
    check: Callable[[Facts], bool]
    """The same condition in Python."""
    message: str
    """Message template, the same for the API server and the operator; its {placeholders}
    are keys of PLACEHOLDERS."""
    reason: str = "FieldValueInvalid"
    """CEL reason: FieldValueInvalid, FieldValueRequired or FieldValueForbidden."""
    detail: str = ""
    """Numbers behind a refusal, added by the operator only; any Facts attribute may be a
    placeholder here."""

    def render(self, facts: Facts) -> str:
        """The message for a spec that breaks the rule, with the detail if there is one."""
        text = _fill(self.message, facts)
        return f"{text} ({_fill(self.detail, facts)})" if self.detail else text

    def message_expression(self) -> str | None:
        """The message as a CEL string expression, or None when it has no placeholders."""
        parts = _PLACEHOLDER.split(self.message)
        if len(parts) == 1:
            return None
        # split() alternates literal text and placeholder names.
        pieces = [PLACEHOLDERS[p][0] if i % 2 else json.dumps(p) for i, p in enumerate(parts) if p]
        return " + ".join(pieces)

    def static_message(self) -> str:
        """The message with placeholders in words: the API server's fallback."""
        return _PLACEHOLDER.sub(lambda m: PLACEHOLDERS[m.group(1)][1], self.message)


def _fill(template: str, facts: Facts) -> str:
    return _PLACEHOLDER.sub(lambda m: str(getattr(facts, m.group(1))), template)


def _is(strategies: tuple[StrategyType, ...]) -> str:
    return f"{STRATEGY} in {_cel_list(tuple(str(s) for s in strategies))}"


_WORKERS = _is(WORKER_STRATEGIES)
_STAGES = _is(STAGE_STRATEGIES)
_PS_NEEDED = (
    f'{STRATEGY} == "ParameterServer" && ({MODE} in ["Async", "EASGD"] || '
    f'({MODE} == "Hogwild" && has(self.roles.worker) && self.roles.worker.replicas > 1))'
)
_1F1B = _cel_list(tuple(str(s) for s in ONE_F_ONE_B))
_DP_BATCH = (
    f'({_is(DATA_PARALLEL_STRATEGIES)} || ({STRATEGY} == "ParameterServer" && {MODE} == "Sync"))'
    " && has(self.roles.worker)"
)
_HYBRID_GRID = f'{STRATEGY} == "Hybrid" && has(self.roles.stage) && {DATA_PARALLEL} > 0'
_HYBRID_EVEN = f"{_HYBRID_GRID} && {STAGE_PROCESSES} % {DATA_PARALLEL} == 0"


def _ps_needed(f: Facts) -> bool:
    if f.strategy != StrategyType.PARAMETER_SERVER:
        return False
    return f.mode in (PSMode.ASYNC, PSMode.EASGD) or (
        f.mode == PSMode.HOGWILD and f.workerReplicas > 1
    )


def _dp_batch(f: Facts) -> bool:
    sync_ps = f.strategy == StrategyType.PARAMETER_SERVER and f.mode == PSMode.SYNC
    return (f.strategy in DATA_PARALLEL_STRATEGIES or sync_ps) and f.has_worker


def _interleaved_rounds_ok(microbatches: int, degree: int) -> bool:
    # torch's ScheduleInterleaved1F1B runs max(1, microbatches // degree) rounds and needs
    # the micro-batches to split evenly over them.
    return degree <= 0 or microbatches % max(1, microbatches // degree) == 0


def _cel_rounds_ok(degree: str) -> str:
    return (
        f"{degree} <= 0 || {MICROBATCHES} < {degree} || "
        f"{MICROBATCHES} % ({MICROBATCHES} / {degree}) == 0"
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "roles.worker",
        f"!({_WORKERS}) || has(self.roles.worker)",
        lambda f: f.strategy not in WORKER_STRATEGIES or f.has_worker,
        "required for strategy {strategy}: its training processes run in the worker pods",
        "FieldValueRequired",
    ),
    Rule(
        "roles.stage",
        f"!({_WORKERS}) || !has(self.roles.stage)",
        lambda f: f.strategy not in WORKER_STRATEGIES or not f.has_stage,
        "not allowed with strategy {strategy}: stages belong to ModelParallel, Pipeline and "
        "Hybrid; use roles.worker",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.stage",
        f"!({_STAGES}) || has(self.roles.stage)",
        lambda f: f.strategy not in STAGE_STRATEGIES or f.has_stage,
        "required for strategy {strategy}: its model is split over the stage pods",
        "FieldValueRequired",
    ),
    Rule(
        "roles.worker",
        f"!({_STAGES}) || !has(self.roles.worker)",
        lambda f: f.strategy not in STAGE_STRATEGIES or not f.has_worker,
        "not allowed with strategy {strategy}: its processes are pipeline stages; use roles.stage",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.ps",
        f'{STRATEGY} == "ParameterServer" || !has(self.roles.ps)',
        lambda f: f.strategy == StrategyType.PARAMETER_SERVER or not f.has_ps,
        "only allowed with strategy ParameterServer, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.ps",
        f"!({_PS_NEEDED}) || has(self.roles.ps)",
        lambda f: not _ps_needed(f) or f.has_ps,
        "required for strategy ParameterServer in mode {mode} (Async and EASGD always, "
        "Hogwild with more than one worker pod): the parameter servers hold the model",
        "FieldValueRequired",
    ),
    Rule(
        "strategy.parameterServer",
        f'!has(self.strategy.parameterServer) || {STRATEGY} == "ParameterServer"',
        lambda f: not f.has_ps_settings or f.strategy == StrategyType.PARAMETER_SERVER,
        "only allowed with strategy ParameterServer, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "strategy.pipeline",
        f'!has(self.strategy.pipeline) || {STRATEGY} in ["Pipeline", "Hybrid"]',
        lambda f: not f.has_pipeline_settings or f.strategy in ("Pipeline", "Hybrid"),
        "only allowed with strategy Pipeline or Hybrid, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "strategy.hybrid",
        f'!has(self.strategy.hybrid) || {STRATEGY} == "Hybrid"',
        lambda f: not f.has_hybrid_settings or f.strategy == StrategyType.HYBRID,
        "only allowed with strategy Hybrid, not {strategy}",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.stage",
        f'{STRATEGY} != "ModelParallel" || !has(self.roles.stage) || {STAGE_PROCESSES} >= 2',
        lambda f: f.strategy != StrategyType.MODEL_PARALLEL or f.stageProcesses >= 2,
        "strategy ModelParallel needs at least 2 stage processes (replicas x procsPerPod)",
        detail="got {stageProcesses}",
    ),
    Rule(
        "strategy.pipeline.microbatches",
        f'!({STRATEGY} == "Pipeline" && has(self.roles.stage) && {SCHEDULE} in {_1F1B}) || '
        f"{MICROBATCHES} >= {STAGE_PROCESSES}",
        lambda f: (
            not (f.strategy == "Pipeline" and f.has_stage and f.schedule in ONE_F_ONE_B)
            or f.microbatches >= f.stageProcesses
        ),
        "schedule {schedule} needs at least as many micro-batches as pipeline stages "
        "(stage processes)",
        detail="{microbatches} micro-batches, {stageProcesses} stages",
    ),
    Rule(
        "strategy.hybrid.dataParallel",
        f"!({_HYBRID_GRID}) || {STAGE_PROCESSES} % {DATA_PARALLEL} == 0",
        lambda f: (
            not (f.strategy == "Hybrid" and f.has_stage) or f.stageProcesses % f.dataParallel == 0
        ),
        "must divide the stage processes (replicas x procsPerPod) evenly",
        detail="{stageProcesses} stage processes, dataParallel {dataParallel}",
    ),
    Rule(
        "roles.stage",
        f"!({_HYBRID_EVEN}) || {PIPELINE_DEGREE} >= 2",
        lambda f: (
            not (f.strategy == "Hybrid" and f.has_stage)
            or f.stageProcesses % f.dataParallel != 0
            or f.pipelineDegree >= 2
        ),
        "strategy Hybrid needs a pipeline degree (stage processes / "
        "strategy.hybrid.dataParallel) of at least 2",
        detail="{stageProcesses} stage processes / {dataParallel} = {pipelineDegree}",
    ),
    Rule(
        "strategy.pipeline.microbatches",
        f"!({_HYBRID_EVEN} && {SCHEDULE} in {_1F1B}) || {MICROBATCHES} >= {PIPELINE_DEGREE}",
        lambda f: (
            not (
                f.strategy == "Hybrid"
                and f.has_stage
                and f.stageProcesses % f.dataParallel == 0
                and f.schedule in ONE_F_ONE_B
            )
            or f.microbatches >= f.pipelineDegree
        ),
        "schedule {schedule} needs at least as many micro-batches as pipeline stages "
        "(stage processes / strategy.hybrid.dataParallel)",
        detail="{microbatches} micro-batches, pipeline degree {pipelineDegree}",
    ),
    Rule(
        "strategy.pipeline.microbatches",
        f'!({STRATEGY} == "Pipeline" && has(self.roles.stage) && '
        f'{SCHEDULE} == "Interleaved1F1B") || {_cel_rounds_ok(STAGE_PROCESSES)}',
        lambda f: (
            not (f.strategy == "Pipeline" and f.has_stage and f.schedule == "Interleaved1F1B")
            or _interleaved_rounds_ok(f.microbatches, f.stageProcesses)
        ),
        "schedule Interleaved1F1B needs the micro-batches to be a multiple of the rounds "
        "(micro-batches / pipeline stages, rounded down)",
        detail="{microbatches} micro-batches, {stageProcesses} stages",
    ),
    Rule(
        "strategy.pipeline.microbatches",
        f'!({_HYBRID_EVEN} && {SCHEDULE} == "Interleaved1F1B") || '
        f"{_cel_rounds_ok(PIPELINE_DEGREE)}",
        lambda f: (
            not (
                f.strategy == "Hybrid"
                and f.has_stage
                and f.stageProcesses % f.dataParallel == 0
                and f.schedule == "Interleaved1F1B"
            )
            or _interleaved_rounds_ok(f.microbatches, f.pipelineDegree)
        ),
        "schedule Interleaved1F1B needs the micro-batches to be a multiple of the rounds "
        "(micro-batches / pipeline degree, rounded down)",
        detail="{microbatches} micro-batches, pipeline degree {pipelineDegree}",
    ),
    Rule(
        "trainer.batchSize",
        f'{STRATEGY} != "Pipeline" || self.trainer.batchSize % {MICROBATCHES} == 0',
        lambda f: f.strategy != "Pipeline" or f.batchSize % f.microbatches == 0,
        "must be divisible by strategy.pipeline.microbatches",
        detail="{batchSize} is not a multiple of {microbatches}",
    ),
    Rule(
        "trainer.batchSize",
        f"!({_HYBRID_GRID}) || self.trainer.batchSize % ({DATA_PARALLEL} * {MICROBATCHES}) == 0",
        lambda f: (
            not (f.strategy == "Hybrid" and f.has_stage)
            or f.batchSize % (f.dataParallel * f.microbatches) == 0
        ),
        "must be divisible by strategy.hybrid.dataParallel x strategy.pipeline.microbatches",
        detail="{batchSize} is not a multiple of {dataParallel} x {microbatches}",
    ),
    Rule(
        "trainer.batchSize",
        f"!({_DP_BATCH}) || self.trainer.batchSize % {WORKER_PROCESSES} == 0",
        lambda f: not _dp_batch(f) or f.batchSize % f.workerProcesses == 0,
        "must be divisible by the data-parallel worker processes (replicas x procsPerPod)",
        detail="{batchSize} is not a multiple of {workerProcesses}",
    ),
    Rule(
        "runPolicy.maxBackoffSeconds",
        "self.runPolicy.maxBackoffSeconds >= self.runPolicy.backoffSeconds",
        lambda f: f.maxBackoffSeconds >= f.backoffSeconds,
        "must be at least runPolicy.backoffSeconds",
        detail="{maxBackoffSeconds} < {backoffSeconds}",
    ),
)

# Spec fields that may change after creation; everything else is fixed once the job exists
# (a running gang cannot change shape, and a restart must resume the same training).
MUTABLE_SPEC_FIELDS = frozenset({"suspend"})
MUTABLE_RUN_POLICY_FIELDS = frozenset({"ttlSecondsAfterFinished", "activeDeadlineSeconds"})
IMMUTABLE_MESSAGE = "is immutable after creation; delete and re-create the job to change it"
