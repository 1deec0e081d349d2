"""Pipeline and Hybrid with strategy.tensorParallel (3-D parallelism): accepted specs, and
refused ones as (spec, field, words of the message). Shared by
test_validation_pipeline_tp, test_validation's every-rule-is-exercised check and the API
server's test (integration/test_api_validation_pipeline_tp)."""

from __future__ import annotations

from typing import Any


def pp_tp(
    stages: int,
    size: int = 2,
    dp: int | None = None,
    schedule: str = "1F1B",
    microbatches: int = 4,
    groups: list[dict[str, Any]] | None = None,
    **trainer: Any,
) -> dict[str, Any]:
    """A Pipeline (dp None) or Hybrid spec of `stages` single-process stage pods, every
    stage split over `size` of them."""
    strategy: dict[str, Any] = {
        "type": "Pipeline" if dp is None else "Hybrid",
        "pipeline": {"schedule": schedule, "microbatches": microbatches},
        "tensorParallel": {"size": size},
    }
    if dp is not None:
        strategy["hybrid"] = {"dataParallel": dp}
    stage: dict[str, Any] = {"replicas": stages}
    if groups:
        stage["groups"] = groups
    return {"strategy": strategy, "roles": {"stage": stage}, "trainer": trainer}


GPT = {"type": "GPT", "layers": 2, "dModel": 64, "heads": 4}
TOKENS = {"type": "SyntheticTokens"}

PIPELINE_TP_GOOD: list[dict[str, Any]] = [
    pp_tp(4),  # pp 2 x tp 2
    pp_tp(8, dp=2, batchSize=64),  # pp 2 x dp 2 x tp 2
    # 1F1B needs micro-batches >= pipeline ranks: 8 stage processes / tp 4 = 2 ranks.
    pp_tp(8, size=4, microbatches=2, model={"type": "MLP", "hiddenSizes": [32, 64]}),
    pp_tp(4, schedule="GPipe", model=GPT, dataset=TOKENS),
    pp_tp(8, schedule="Interleaved1F1B", model={"type": "MLP", "hiddenSizes": [32] * 7}),
]

PIPELINE_TP_BAD: list[tuple[dict[str, Any], str, str]] = [
    (pp_tp(3), "spec.strategy.tensorParallel.size", "must divide the stage processes"),
    (pp_tp(8, size=3, dp=2), "spec.strategy.tensorParallel.size",
     "must divide the stage processes"),
    (pp_tp(4, dp=2), "spec.roles.stage", "pipeline degree"),
    (pp_tp(8, microbatches=2), "spec.strategy.pipeline.microbatches",
     "divided by strategy.tensorParallel.size"),
    (pp_tp(4, schedule="PipeDream"), "spec.strategy.pipeline.schedule",
     "cannot run with strategy.tensorParallel"),
    (pp_tp(4, schedule="PipeDream2BW"), "spec.strategy.pipeline.schedule",
     "cannot run with strategy.tensorParallel"),
    (pp_tp(4, groups=[{"name": "a", "replicas": 2}, {"name": "b", "replicas": 2}]),
     "spec.roles.stage.groups", "cannot be combined with strategy.tensorParallel"),
    ({"strategy": {"type": "ModelParallel", "tensorParallel": {"size": 2}},
      "roles": {"stage": {"replicas": 4}}},
     "spec.strategy.tensorParallel", "only allowed with strategy TensorParallel, Pipeline or"),
    (pp_tp(4, model={**GPT, "heads": 3, "dModel": 48}, dataset=TOKENS),
     "spec.trainer.model.heads", "attention is split by heads"),
    (pp_tp(4, model={"type": "MLP", "hiddenSizes": [32, 33]}),
     "spec.trainer.model.hiddenSizes", "multiple of strategy.tensorParallel.size"),
    (pp_tp(4, model={"type": "CNN"}), "spec.trainer.model.type", "no tensor-parallel plan"),
    # 16 stage processes / tp 2 = 8 pipeline stages, more than the MLP's 4 blocks.
    (pp_tp(16, microbatches=8), "spec.roles.stage", "more pipeline stages than the model"),
]  # fmt: skip
