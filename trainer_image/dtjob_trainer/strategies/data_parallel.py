"""DataParallel: a full replica per process, DistributedDataParallel averages the
gradients (ring all-reduce) during backward; each process takes its contiguous shard of
the global batch, so together they compute exactly the single-process step."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.dist import flat_parameters
from dtjob_trainer.evaluate import final_accuracy
from dtjob_trainer.loop import Trainable, run_loop
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.sharded import ShardedState
from dtjob_trainer.state import gather_full_state, load_full_state
from dtjob_trainer.strategies.common import shard_forward_backward

NAME = "DataParallel"


def run(ctx: RunContext) -> RunResult:
    """Train with DDP over every process of the job."""
    model = ctx.build_model().to(ctx.device)
    device_ids = [ctx.device] if ctx.device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=device_ids)
    optimizer = build_optimizer(ddp.parameters(), ctx.cfg.trainer.optimizer)
    forward_backward = shard_forward_backward(ctx, ddp, ctx.rank, ctx.world_size)

    def step(s: int) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = forward_backward(s)
        optimizer.step()
        return loss

    return run_loop(
        ctx,
        Trainable(
            name=ctx.strategy_name or NAME,
            step=step,
            state_dict=lambda: gather_full_state(ddp, optimizer, ctx.rank),
            load_state_dict=lambda state: load_full_state(ddp, optimizer, state),
            # Full checkpoints, but it also resumes from FSDP's sharded ones (each rank
            # reads whole tensors), e.g. when Auto picks another strategy after a resize.
            sharded=ShardedState(ddp, optimizer),
            evaluate=lambda: final_accuracy(model, ctx) if ctx.rank == 0 else None,
            samples_per_step=ctx.cfg.trainer.batchSize,
            replica=lambda: flat_parameters(model),
        ),
    )
