"""Tensor parallelism inside pipeline stages: the pieces Pipeline and Hybrid need when
strategy.tensorParallel is set (strategies/pipeline_tp.py builds the mesh).

Each stage module is split over its tp ranks with the model's Megatron plan restricted to
the stage (models/tp_plan.stage_plan), so what crosses a stage boundary is always the full
activation: every tp rank of stage s sends its (identical) output to the rank of stage
s + 1 with the same tp index, and the gradient comes back the same way. Checkpoints are
sharded (strategies/stage_ckpt.py): the split parameters are DTensors, which DCP stores as
pieces of the unsplit tensors under the unsplit model's names, as every pipeline
checkpoint is. `full_stage_state` gathers whole tensors for the result file, and
`load_stage_state` restores from full checkpoints of earlier versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import parallelize_module

from dtjob_api.spec import ModelSpec
from dtjob_trainer.models.tp_plan import stage_plan

# Full tensors on every tp rank: torch's cpu_offload would keep them on global rank 0 only,
# which holds no stage but the first.
FULL = StateDictOptions(full_state_dict=True)


@dataclass(frozen=True)
class StageTP:
    """The tp dimension a pipeline rank's stages are split over."""

    mesh: DeviceMesh
    """1-D mesh of this rank's tp peers (same stage, same replica)."""
    rank: int
    """This rank's index in it."""
    model: ModelSpec
    """The model whose plan splits the stages."""


def parallelize_stage(module: nn.Sequential, tp: StageTP) -> nn.Sequential:
    """Split the stage `module` (built whole and seeded, so every tp rank cuts the same
    tensors) over `tp` in place; returns it."""
    plan = stage_plan(tp.model, {name for name, _ in module.named_children()})
    if plan:
        parallelize_module(module, tp.mesh, plan)
    return module


def full_stage_state(local: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective over the tp peers: this rank's stages' parameters and optimizer state as
    full CPU tensors, name-keyed (pipeline.merge_stage_states' input)."""
    model_sd, optim_sd = get_state_dict(local, optimizer, options=FULL)
    return {"model": _to_cpu(model_sd), "optimizer": _to_cpu(optim_sd)}


def load_stage_state(
    local: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Restore this rank's stages from full, name-keyed state (only its own names): each
    split parameter and its optimizer state take this rank's shard."""
    set_model_state_dict(local, state["model"], options=FULL)
    set_optimizer_state_dict(local, optimizer, state["optimizer"], options=FULL)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    return obj
