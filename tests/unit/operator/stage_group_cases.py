"""Heterogeneous-pipeline specs (roles.stage.groups): a good one and refused ones as
(spec, field, words of the message). Shared by test_stage_groups and test_validation's
every-rule-is-exercised check."""

from __future__ import annotations

import copy
from typing import Any

CPU = {"name": "cpu", "replicas": 1, "cpu": "8", "memory": "64Gi"}
GPU = {"name": "gpu", "replicas": 2, "gpus": 1, "cpu": "4", "memory": "16Gi"}


def hetero(*groups: dict[str, Any], strategy: str = "Pipeline", **extra: Any) -> dict[str, Any]:
    """A Pipeline job whose stage pods are the given groups (an MLP of 4 blocks)."""
    replicas = sum(int(g.get("replicas", 1)) for g in groups)
    spec: dict[str, Any] = {
        "strategy": {"type": strategy},
        "roles": {"stage": {"replicas": replicas, "groups": [copy.deepcopy(g) for g in groups]}},
        "trainer": {"model": {"type": "MLP", "hiddenSizes": [64, 64, 64]}},
    }
    for path, value in extra.items():
        node = spec
        *parents, leaf = path.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return spec


GOOD = hetero(CPU, GPU)

STAGE_GROUP_BAD: list[tuple[dict[str, Any], str, str]] = [
    (
        hetero(CPU, GPU, strategy="Hybrid"),
        "spec.roles.stage.groups",
        "only allowed with strategy Pipeline or ModelParallel",
    ),
    (
        hetero(CPU, GPU, strategy__pipeline={"schedule": "Interleaved1F1B", "microbatches": 4}),
        "spec.roles.stage.groups",
        "Interleaved1F1B",
    ),
    (
        hetero({**CPU, "blocks": 1}, {**GPU, "blocks": 2}),
        "spec.roles.stage.groups",
        "must add up to the model's blocks",
    ),
    (
        hetero(CPU, GPU, strategy__backend="nccl"),
        "spec.strategy.backend",
        "nccl cannot reach the ranks of CPU stage groups",
    ),
]
