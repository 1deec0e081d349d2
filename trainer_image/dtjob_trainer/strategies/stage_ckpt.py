"""Sharded checkpoints of pipeline stages (Pipeline, ModelParallel, Hybrid, and both with
strategy.tensorParallel), in exactly the layout FSDP writes, so that checkpoints move
between strategies and pipeline layouts.

Every stage rank writes its own blocks' parameters and optimizer state with
torch.distributed.checkpoint, keyed by the full model's names ("2.0.weight" on the rank
holding block 2): the keys FSDP2's sharded state has. A split (tp) parameter is a DTensor,
which DCP stores as pieces of one global tensor. The replicas of a stage (Hybrid's dp
ranks) offer identical tensors under identical keys, and DCP's save planner keeps one
writer per piece (`dedup_save_plans`), so nothing is written twice.

The one entry that is not per-parameter is the optimizer's param_groups: DCP stores
group 0's hyperparameters and its "params" list (parameter names) under shared keys, and
a stage that listed only its own names would clash with the other stages (DCP keeps one
rank's value). Every stage therefore lists the WHOLE model's names, the very list FSDP's
and DataParallel's optimizers give: the value is the same on every rank and in every
strategy, and on load each stage keeps only its own names. torch's
`flatten_optimizer_state_dict` would avoid the clash as well, but changes the keys of
param_groups, so FSDP's existing checkpoints and pipeline ones would no longer read each
other; this keeps the one format. The trainer's optimizers have one parameter group.

DCP cannot describe a `_StridedShard` piece (the GPT's fused qkv split by heads,
models/tp_plan.py: a rank's rows are three separate runs of the global tensor), so such
tensors are written whole: every tp peer offers the same full tensor, DCP writes it once,
and on load each peer cuts its own rows again (`distribute_tensor`, locally). That costs a
stage's tp peers the full qkv tensors for the time of a save or load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

from dtjob_trainer.sharded import ShardedState
from dtjob_trainer.state import select_optimizer_state


@dataclass
class StageShardedState(ShardedState):
    """This rank's stages (`model`: their blocks under full-model names) and optimizer as
    DCP reads and writes them."""

    names: list[str] = field(default_factory=list)
    """The whole model's parameter names in model order."""

    def state_dict(self) -> dict[str, Any]:
        """Collective over the tp peers when stages are split: {"model", "optimizer"} of
        this rank's blocks, param_groups listing the whole model's names."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        groups = cast(list[dict[str, Any]], optim_sd["param_groups"])
        if len(groups) != 1:
            raise ValueError(f"a stage optimizer with {len(groups)} parameter groups")
        optimizer = {
            "state": _map(optim_sd["state"], _whole_if_strided),
            "param_groups": [{**groups[0], "params": list(self.names)}],
        }
        return {"model": _map(model_sd, _whole_if_strided), "optimizer": optimizer}

    def load(self, state: dict[str, Any]) -> None:
        """Install a state read into `state_dict()`'s tensors: only this rank's names
        stay in param_groups (the checkpoint lists the whole model's)."""
        params = dict(self.model.named_parameters())
        model_sd = {k: _like(v, params.get(k)) for k, v in state["model"].items()}
        optim = {
            "state": {
                k: {slot: _like(v, params.get(k)) for slot, v in slots.items()}
                for k, slots in state["optimizer"]["state"].items()
            },
            "param_groups": state["optimizer"]["param_groups"],
        }
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=model_sd,
            optim_state_dict=select_optimizer_state(optim, set(params)),
        )


def _strided(value: Any) -> bool:
    return isinstance(value, DTensor) and any(
        isinstance(p, _StridedShard) for p in value.placements
    )


def _whole_if_strided(value: Any) -> Any:
    # Collective over the tp peers (an all-gather): every peer holds the same result.
    return value.full_tensor() if _strided(value) else value


def _like(value: Any, param: torch.Tensor | None) -> Any:
    """`value` as read, or this rank's rows of it when the live parameter is strided (a
    step counter or a tensor not of the parameter's shape stays as it is)."""
    if param is None or not _strided(param) or not isinstance(value, torch.Tensor):
        return value
    if isinstance(value, DTensor) or value.shape != param.shape:
        return value
    assert isinstance(param, DTensor)
    return distribute_tensor(value, param.device_mesh, param.placements, src_data_rank=None)


def _map(tree: Any, fn: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _map(v, fn) for k, v in tree.items()}
    return fn(tree)
