"""ModelParallel: the model's blocks split over the stage ranks, one batch at a time.

This is the pipeline with a single micro-batch under GPipe: stage r runs its blocks on the
whole batch, sends the activations to stage r + 1, and the gradients come back the same way.
Only one stage computes at a time (no overlap); the point is fitting a model that no
single device holds. A step equals a full-batch step of the whole model.
"""

from __future__ import annotations

from dtjob_api.spec import PipelineSchedule
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.strategies.pipeline import make_plan, run_pipeline

NAME = "ModelParallel"


def run(ctx: RunContext) -> RunResult:
    """Train with the model split over every stage rank of the job."""
    plan = make_plan(
        PipelineSchedule.GPIPE,
        microbatches=1,
        stages_per_rank=1,
        pp_size=ctx.world_size,
        pp_rank=ctx.rank,
    )
    return run_pipeline(ctx, plan, ctx.strategy_name or NAME)
