"""Refused TensorParallel specs: (spec, field, words of the message). Shared by
test_validation_tensor_parallel and test_validation's every-rule-is-exercised check."""

from __future__ import annotations

from typing import Any


def tp(workers: int, size: int | None = 2, **trainer: Any) -> dict[str, Any]:
    """A TensorParallel spec of `workers` single-process pods (size None: the default)."""
    strategy: dict[str, Any] = {"type": "TensorParallel"}
    if size is not None:
        strategy["tensorParallel"] = {"size": size}
    return {"strategy": strategy, "roles": {"worker": {"replicas": workers}}, "trainer": trainer}


GPT = {"type": "GPT", "layers": 2, "dModel": 64, "heads": 4}
TOKENS = {"type": "SyntheticTokens"}

TP_BAD: list[tuple[dict[str, Any], str, str]] = [
    (tp(3), "spec.strategy.tensorParallel.size", "must divide the worker processes"),
    (tp(4, batchSize=33), "spec.trainer.batchSize", "data-parallel degree"),
    (tp(2, model={**GPT, "heads": 3, "dModel": 48}, dataset=TOKENS),
     "spec.trainer.model.heads", "attention is split by heads"),
    (tp(2, model={"type": "MLP", "hiddenSizes": [32, 33]}),
     "spec.trainer.model.hiddenSizes", "multiple of strategy.tensorParallel.size"),
    (tp(2, model={"type": "CNN"}), "spec.trainer.model.type", "no tensor-parallel plan"),
    ({"strategy": {"type": "DataParallel", "tensorParallel": {"size": 2}},
      "roles": {"worker": {"replicas": 2}}},
     "spec.strategy.tensorParallel", "only allowed with strategy TensorParallel"),
    ({"strategy": {"type": "TensorParallel"}, "roles": {"stage": {"replicas": 2}}},
     "spec.roles.worker", "required for strategy TensorParallel"),
]  # fmt: skip
