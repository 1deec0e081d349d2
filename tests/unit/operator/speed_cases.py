"""The speed options trainer.compile and trainer.activationCheckpointing: specs that may
set them, and refused ones as (spec, field, words of the message). Shared by
test_validation_speed, test_validation's every-rule-is-exercised check and the API
server's test (integration/test_api_validation_speed)."""

from __future__ import annotations

from typing import Any

from unit.operator.pipeline_tp_cases import pp_tp
from unit.operator.stage_group_cases import CPU, GPU, hetero

CHECKPOINT = {"activationCheckpointing": True}
COMPILE = {"compile": True}
BOTH = {**CHECKPOINT, **COMPILE}
OPTIONS = {"trainer.compile": COMPILE, "trainer.activationCheckpointing": CHECKPOINT}


def job(strategy: str, trainer: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """A `strategy` spec with these trainer settings and strategy settings: 2 worker pods,
    or 4 stage pods for the strategies that cut the model into stages."""
    staged = strategy in ("Pipeline", "Hybrid", "ModelParallel")
    roles = {"stage": {"replicas": 4}} if staged else {"worker": {"replicas": 2}}
    return {"strategy": {"type": strategy, **settings}, "roles": roles, "trainer": trainer}


def pipeline(schedule: str, trainer: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return job("Pipeline", trainer, pipeline={"schedule": schedule, "microbatches": 4}, **settings)


_TP = {"tensorParallel": {"size": 2}}

SPEED_GOOD: list[dict[str, Any]] = [
    job("DataParallel", BOTH),
    job("FSDP", BOTH),
    job("CPUOffload", BOTH),
    job("Auto", BOTH),
    job("ParameterServer", CHECKPOINT, parameterServer={"mode": "EASGD"}),
    # The pipelines of torch.distributed.pipelining run the blocks as built.
    pipeline("GPipe", BOTH),
    pipeline("1F1B", BOTH),
    {**pipeline("Interleaved1F1B", BOTH), "roles": {"stage": {"replicas": 2}}},
    job("Hybrid", BOTH, hybrid={"dataParallel": 2}),
    job("ModelParallel", BOTH),
    # Tensor parallelism splits the checkpointed / compiled blocks' layers in place.
    job("TensorParallel", BOTH, **_TP),
    pp_tp(4, **BOTH),
    pp_tp(8, dp=2, batchSize=64, **BOTH),
]  # fmt: skip

_HOGWILD = {"parameterServer": {"mode": "Hogwild"}}
_REFUSED: list[tuple[dict[str, Any], str]] = [
    (job("ParameterServer", {}, **_HOGWILD), "not with ParameterServer mode Hogwild"),
    (pipeline("PipeDream", {}), "not with schedule PipeDream, PipeDream2BW or roles.stage.groups"),
    (
        pipeline("PipeDream2BW", {}),
        "not with schedule PipeDream, PipeDream2BW or roles.stage.groups",
    ),
    (hetero(CPU, GPU, strategy="ModelParallel"), "roles.stage.groups"),
]

SPEED_BAD: list[tuple[dict[str, Any], str, str]] = [
    ({**spec, "trainer": {**spec.get("trainer", {}), **options}}, f"spec.{field}", words)
    for field, options in OPTIONS.items()
    for spec, words in _REFUSED
]
