"""3-D parallelism: Pipeline or Hybrid with strategy.tensorParallel, pipeline x data
parallel x tensor parallel on a DeviceMesh ("pp", "dp", "tp").

The stage processes form a (pp, dp, tp) grid in row-major order (docs/strategies.md):
rank = (pp_index * dp + dp_index) * tp + tp_index, so the tp peers of a stage replica are
consecutive ranks (the processes of one pod when procsPerPod is the tp size: tensor
parallelism talks twice per layer and wants the fastest links), the replicas of a stage
follow each other, and the stage of a rank is rank // (dp * tp). A pipeline chain is the
ranks with the same (dp_index, tp_index), one per stage; a dp group the ranks with the same
(pp_index, tp_index). dp is strategy.hybrid.dataParallel for Hybrid and 1 for Pipeline.

Each stage is split over its tp peers Megatron-style (strategies/stage_tp.py); activations
and their gradients travel along the pipeline chains under torch's synchronous schedules
(GPipe, 1F1B, Interleaved1F1B); after the backward every rank averages its gradients
(local shards of split parameters) over its dp group, so one step equals a full-batch step
of the whole model.
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from dtjob_api.spec import StrategyType
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.strategies.pipeline import make_plan, run_pipeline
from dtjob_trainer.strategies.stage_tp import StageTP


def build_mesh(device_type: str, world_size: int, dp: int, tp: int) -> DeviceMesh:
    """The ("pp", "dp", "tp") mesh over every rank (the config's rules: dp x tp divides
    them)."""
    return init_device_mesh(
        device_type, (world_size // (dp * tp), dp, tp), mesh_dim_names=("pp", "dp", "tp")
    )


def coordinate(rank: int, dp: int, tp: int) -> tuple[int, int, int]:
    """(pp_index, dp_index, tp_index) of a stage rank."""
    pp_rank, rest = divmod(rank, dp * tp)
    return (pp_rank, *divmod(rest, tp))


def run(ctx: RunContext) -> RunResult:
    """Train with one tensor-parallel pipeline per data-parallel replica."""
    cfg = ctx.cfg
    dp = cfg.hybrid.dataParallel if cfg.strategy.type == StrategyType.HYBRID else 1
    tp = cfg.stage_tensor_parallel_size()
    mesh = build_mesh(ctx.device.type, ctx.world_size, dp, tp)
    pp_rank, dp_rank, tp_rank = coordinate(ctx.rank, dp, tp)
    p = cfg.pipeline
    plan = make_plan(
        p.schedule, p.microbatches, p.stagesPerRank, ctx.world_size // (dp * tp), pp_rank
    )
    return run_pipeline(
        ctx,
        plan,
        ctx.strategy_name or str(cfg.strategy.type),
        pp_group=mesh.get_group("pp"),
        dp_group=mesh.get_group("dp"),
        dp_rank=dp_rank,
        dp_size=dp,
        tp=StageTP(mesh["tp"], tp_rank, cfg.trainer.model),
    )
