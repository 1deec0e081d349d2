"""Auto: pick DataParallel, FSDP or CPUOffload from the model's training-state memory
(parameters + gradients + optimizer slots) and its activations (memory_estimate.py, one
rank's share of a step) against the smallest per-GPU memory of the job,
say in the log and in the job's status (progress `message`) what was chosen and why, and
run it. `choose_strategy` is the pure decision."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.distributed as dist

from dtjob_api.spec import OptimizerSpec, OptimizerType, Precision
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.memory_estimate import activation_bytes
from dtjob_trainer.models import model_parameter_count
from dtjob_trainer.strategies import load_strategy

# Share of a GPU's memory the training state may take; the rest is left to activations,
# the CUDA context and allocator fragmentation.
STATE_BUDGET = 0.5
# Share of a GPU's memory training state and activations together may take (the CUDA
# context, the allocator's fragmentation and temporaries take the rest).
TOTAL_BUDGET = 0.9
GIB = float(1 << 30)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    """The strategy Auto runs and why."""

    strategy: str
    reason: str


def optimizer_slots(cfg: OptimizerSpec) -> int:
    """Per-parameter state tensors the optimizer keeps (momentum buffer, Adam moments)."""
    if cfg.type == OptimizerType.SGD:
        return 1 if cfg.momentum > 0 else 0
    return 2


def state_bytes(params: int, precision: Precision, slots: int) -> int:
    """Parameters + gradients + optimizer slots, in bytes (bf16 keeps fp32 master weights)."""
    width = 8 if precision == Precision.FP64 else 4
    return params * width * (2 + slots)


def choose_strategy(
    params: int,
    precision: Precision,
    slots: int,
    processes: int,
    gpu_memory: int | None,
    activations: int = 0,
) -> Choice:
    """DataParallel when a full replica's state fits each GPU's state budget and, with the
    `activations` of one rank's step, its total budget; FSDP when a 1/N shard does; else
    CPUOffload. DataParallel without GPUs (host memory holds it anyway)."""
    need = state_bytes(params, precision, slots)
    desc = f"{params:,} parameters need {need / GIB:.2f} GiB of training state"
    if activations:
        desc += f" and {activations / GIB:.2f} GiB of activations per rank"
    if gpu_memory is None:
        return Choice("DataParallel", f"{desc}; no GPU, so replicas live in host memory")
    budget, total = STATE_BUDGET * gpu_memory, TOTAL_BUDGET * gpu_memory
    gpu = (
        f"{int(STATE_BUDGET * 100)}% (state) / {int(TOTAL_BUDGET * 100)}% (with activations) "
        f"of {gpu_memory / GIB:.1f} GiB per GPU"
        if activations
        else f"{int(STATE_BUDGET * 100)}% of {gpu_memory / GIB:.1f} GiB per GPU"
    )

    def fits(state: float) -> bool:
        return state <= budget and state + activations <= total

    if fits(need):
        return Choice("DataParallel", f"{desc}, a full replica fits in {gpu}")
    shard = need / processes
    if fits(shard):
        return Choice(
            "FSDP",
            f"{desc}; a replica exceeds {gpu} but a 1/{processes} shard "
            f"({shard / GIB:.2f} GiB) fits",
        )
    tip = (
        "; the activations alone exceed it: set trainer.activationCheckpointing or a smaller batch"
        if activations > total
        else ""
    )
    return Choice(
        "CPUOffload",
        f"{desc}; even a 1/{processes} shard ({shard / GIB:.2f} GiB) exceeds "
        f"{gpu}, so parameters and optimizer state stay in host memory{tip}",
    )


def smallest_gpu_memory(ctx: RunContext) -> int | None:
    """Total memory of the smallest GPU over all ranks (a collective); None without GPUs."""
    if ctx.device.type != "cuda":
        return None
    mine = torch.cuda.get_device_properties(ctx.device).total_memory
    value = torch.tensor([mine], dtype=torch.int64, device=ctx.wire)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value.item())


def run(ctx: RunContext) -> RunResult:
    """Choose, report the choice, and run the chosen strategy."""
    t = ctx.cfg.trainer
    per_rank = -(-t.batchSize // ctx.world_size)
    choice = choose_strategy(
        model_parameter_count(ctx.cfg),
        t.precision,
        optimizer_slots(t.optimizer),
        ctx.world_size,
        smallest_gpu_memory(ctx),
        activation_bytes(t.model, per_rank, t.precision, t.activationCheckpointing),
    )
    message = f"Auto chose {choice.strategy}: {choice.reason}"
    if ctx.rank == 0:
        log.info(message)
    ctx.reporter.update(force=True, message=message)
    ctx.strategy_name = choice.strategy
    result = load_strategy(choice.strategy)(ctx)
    result.message = message
    return result
