"""CPUOffload (the "central storage" strategy): FSDP2 sharding with `CPUOffloadPolicy`, so
parameters, gradients and optimizer state live in host memory and only the block being
computed visits the device. Pinned host memory needs an accelerator, so it is used only
when CUDA is present."""

from __future__ import annotations

import torch
from torch.distributed.fsdp import CPUOffloadPolicy

from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.strategies.fsdp import run_sharded

NAME = "CPUOffload"


def run(ctx: RunContext) -> RunResult:
    """Train with FSDP2 + CPU offload over every process of the job."""
    policy = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    return run_sharded(ctx, policy, ctx.strategy_name or NAME)
