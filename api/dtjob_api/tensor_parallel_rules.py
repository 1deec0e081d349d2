"""The rules of tensor parallelism: strategy TensorParallel, and strategy.tensorParallel
splitting the stages of a Pipeline or Hybrid job (3-D parallelism); rules.py adds these rows
to RULES, so each is enforced as CEL in the CRD and in Python by the operator, like every
other rule."""

from __future__ import annotations

from dtjob_api.facts import (
    BUNDLED_TRAINER,
    DATA_PARALLEL,
    HAS_STAGE_GROUPS,
    PIPELINED,
    SCHEDULE,
    STAGE_PROCESSES,
    STAGE_WIDTH,
    STRATEGY,
    TENSOR_PARALLEL,
    WORKER_PROCESSES,
    Facts,
    cel_is,
    pipelined,
)
from dtjob_api.rule import Rule
from dtjob_api.spec import StrategyType

_TP = f'{STRATEGY} == "TensorParallel" && has(self.roles.worker)'
_TP_GRID = f"{_TP} && {WORKER_PROCESSES} % {TENSOR_PARALLEL} == 0"
# Pipeline and Hybrid with strategy.tensorParallel: every stage split over its tp ranks.
_STAGE_TP = f"{PIPELINED} && has(self.strategy.tensorParallel)"
# Any job whose bundled-model layers are split by strategy.tensorParallel.size.
_ANY_TP = f"(({_TP}) || ({_STAGE_TP}))"


def _tp(f: Facts) -> bool:
    return f.strategy == StrategyType.TENSOR_PARALLEL and f.has_worker


def _tp_grid(f: Facts) -> bool:
    return _tp(f) and f.workerProcesses % f.tensorParallel == 0


def _stage_tp(f: Facts) -> bool:
    return pipelined(f) and f.has_tensor_parallel_settings


def _any_tp(f: Facts) -> bool:
    return _tp(f) or _stage_tp(f)


TENSOR_PARALLEL_RULES: tuple[Rule, ...] = (
    Rule(
        "strategy.tensorParallel",
        "has(self.strategy.tensorParallel)", lambda f: f.has_tensor_parallel_settings,
        cel_is(StrategyType.TENSOR_PARALLEL, StrategyType.PIPELINE, StrategyType.HYBRID),
        lambda f: f.strategy
        in (StrategyType.TENSOR_PARALLEL, StrategyType.PIPELINE, StrategyType.HYBRID),
        "only allowed with strategy TensorParallel, Pipeline or Hybrid, not {strategy}",
        "FieldValueForbidden",
    ),
    # 3-D parallelism: strategy.tensorParallel with Pipeline or Hybrid splits every stage
    # over `size` processes (rank = (pp_index x dp + dp_index) x tp + tp_index).
    Rule(
        "strategy.tensorParallel.size",
        f'{_STAGE_TP} && ({STRATEGY} != "Hybrid" || {STAGE_PROCESSES} % {DATA_PARALLEL} == 0)',
        lambda f: _stage_tp(f)
        and (f.strategy != StrategyType.HYBRID or f.stageProcesses % f.dataParallel == 0),
        f"{STAGE_PROCESSES} % {STAGE_WIDTH} == 0",
        lambda f: f.stageProcesses % f.stageWidth == 0,
        "must divide the stage processes (replicas x procsPerPod; for Hybrid, divided by "
        "strategy.hybrid.dataParallel) evenly: the pipeline degree is their quotient",
        detail="{stageProcesses} stage processes, width {stageWidth}",
    ),
    Rule(
        "strategy.pipeline.schedule",
        f"{BUNDLED_TRAINER} && {_STAGE_TP}", lambda f: f.bundled_trainer and _stage_tp(f),
        f'!({SCHEDULE} in ["PipeDream", "PipeDream2BW"])',
        lambda f: f.schedule not in ("PipeDream", "PipeDream2BW"),
        "schedule {schedule} cannot run with strategy.tensorParallel: with tensor-parallel "
        "stages use GPipe, 1F1B or Interleaved1F1B",
    ),
    Rule(
        "roles.stage.groups",
        HAS_STAGE_GROUPS, lambda f: f.has_stage_groups,
        "!has(self.strategy.tensorParallel)", lambda f: not f.has_tensor_parallel_settings,
        "cannot be combined with strategy.tensorParallel: a stage group's pods run one "
        "process each, one stage per pod; remove one of the two",
        "FieldValueForbidden",
    ),
    Rule(
        "strategy.tensorParallel.size",
        _TP, _tp,
        f"{WORKER_PROCESSES} % {TENSOR_PARALLEL} == 0",
        lambda f: f.workerProcesses % f.tensorParallel == 0,
        "must divide the worker processes (replicas x procsPerPod) evenly: the "
        "data-parallel degree is their quotient",
        detail="{workerProcesses} worker processes, size {tensorParallel}",
    ),
    Rule(
        "trainer.batchSize",
        f"{BUNDLED_TRAINER} && {_TP_GRID}", lambda f: f.bundled_trainer and _tp_grid(f),
        f"self.trainer.batchSize % ({WORKER_PROCESSES} / {TENSOR_PARALLEL}) == 0",
        lambda f: f.batchSize % (f.workerProcesses // f.tensorParallel) == 0,
        "must be divisible by the data-parallel degree (worker processes / "
        "strategy.tensorParallel.size): every global batch is split evenly over the replicas",
        detail="{batchSize}, {workerProcesses} worker processes, size {tensorParallel}",
    ),
    Rule(
        "trainer.model.heads",
        f'{BUNDLED_TRAINER} && {_ANY_TP} && self.trainer.model.type == "GPT"',
        lambda f: f.bundled_trainer and _any_tp(f) and f.modelType == "GPT",
        f"self.trainer.model.heads % {TENSOR_PARALLEL} == 0",
        lambda f: f.heads % f.tensorParallel == 0,
        "must be a multiple of strategy.tensorParallel.size: attention is split by heads",
        detail="{heads} heads, size {tensorParallel}",
    ),
    Rule(
        "trainer.model.hiddenSizes",
        f'{BUNDLED_TRAINER} && {_ANY_TP} && self.trainer.model.type == "MLP"',
        lambda f: f.bundled_trainer and _any_tp(f) and f.modelType == "MLP",
        f"self.trainer.model.hiddenSizes.all(h, h % {TENSOR_PARALLEL} == 0)",
        lambda f: all(h % f.tensorParallel == 0 for h in f.hiddenSizes),
        "every width must be a multiple of strategy.tensorParallel.size: the layers are "
        "split by features",
        detail="{hiddenSizes}, size {tensorParallel}",
    ),
    Rule(
        "trainer.model.type",
        f"{BUNDLED_TRAINER} && {_ANY_TP}", lambda f: f.bundled_trainer and _any_tp(f),
        '!(self.trainer.model.type in ["CNN", "Custom"])',
        lambda f: f.modelType not in ("CNN", "Custom"),
        "CNN and Custom models have no tensor-parallel plan: use MLP or GPT with "
        "strategy.tensorParallel",
    ),
)  # fmt: skip
