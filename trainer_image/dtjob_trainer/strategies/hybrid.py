"""Hybrid: pipeline x data parallel on a 2-D DeviceMesh ("pp", "dp").

The stage processes form a (pp, dp) grid in row-major order (docs/env-contract.md):
rank = pp_index * dp + dp_index, so the stage of a rank is rank // dp. Each column of the
grid (one dp_index) is a full pipeline that trains on its contiguous shard of the global
batch; after the pipeline's backward every stage averages its gradients with the same stage
of the other replicas (one all-reduce over the "dp" dimension), so every replica takes the
same optimizer step, equal to a full-batch step of the whole model.
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.strategies.pipeline import make_plan, run_pipeline

NAME = "Hybrid"


def build_mesh(device_type: str, world_size: int, dp: int) -> DeviceMesh:
    """The ("pp", "dp") mesh over every rank (the config's rules: dp divides them)."""
    return init_device_mesh(device_type, (world_size // dp, dp), mesh_dim_names=("pp", "dp"))


def run(ctx: RunContext) -> RunResult:
    """Train with one pipeline per data-parallel replica over the job's stage ranks."""
    dp = ctx.cfg.hybrid.dataParallel
    mesh = build_mesh(ctx.device.type, ctx.world_size, dp)
    pp_rank, dp_rank = divmod(ctx.rank, dp)
    p = ctx.cfg.pipeline
    plan = make_plan(p.schedule, p.microbatches, p.stagesPerRank, ctx.world_size // dp, pp_rank)
    return run_pipeline(
        ctx,
        plan,
        ctx.strategy_name or NAME,
        pp_group=mesh.get_group("pp"),
        dp_group=mesh.get_group("dp"),
        dp_rank=dp_rank,
        dp_size=dp,
    )
