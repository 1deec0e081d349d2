"""Pieces shared by the data-parallel family (DataParallel, ParameterServer Sync, FSDP,
CPUOffload): the forward/backward of one rank's shard of the global batch."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from dtjob_trainer.context import RunContext
from dtjob_trainer.data import batch
from dtjob_trainer.speed import compile_loss, to_device, training_loss


def shard_forward_backward(
    ctx: RunContext, model: nn.Module, dp_rank: int, dp_size: int
) -> Callable[[int], torch.Tensor]:
    """A function of the step that runs forward and backward on shard `dp_rank` of
    `dp_size` of the global batch and returns the detached shard loss / dp_size (its share
    of the global mean loss). Gradients are left in the parameters.

    DDP and FSDP average the ranks' gradients, a mean of the shards' means: the global mean
    only when the shards are equal. A shard of n of the B samples is weighted n * dp_size / B
    (exactly 1.0 when the batch divides, so nothing changes then), which makes the average
    the global batch's mean to one rounding whatever the split (data.shard)."""
    cfg = ctx.cfg.trainer
    data = ctx.data
    loss_fn = training_loss(compile_loss(cfg.compile, ctx.device))

    def forward_backward(step: int) -> torch.Tensor:
        x, y = batch(data, step, cfg.batchSize, cfg.seed, dp_rank, dp_size)
        weight = (x.shape[0] * dp_size) / cfg.batchSize
        x, y = to_device(x, ctx.device), to_device(y, ctx.device)
        with ctx.autocast():
            loss = loss_fn(model(x), y)
        torch.autograd.backward(loss * weight)
        return loss.detach() * weight / dp_size

    return forward_backward
