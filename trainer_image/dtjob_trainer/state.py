"""Full (unsharded) training state of a model and its optimizer, gathered to rank 0 and
restored from rank 0, through torch.distributed.checkpoint's state-dict API. It handles
plain modules, DDP and FSDP2 alike, and keys optimizer state by parameter name, so the
checkpoints of DataParallel, FSDP and CPUOffload are interchangeable."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from dtjob_trainer.dist import broadcast_object


def gather_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, rank: int
) -> dict[str, Any] | None:
    """Collective: {"model": ..., "optimizer": ...} on rank 0 (CPU tensors), None elsewhere."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    if rank != 0:
        return None
    return {"model": model_sd, "optimizer": optim_sd}


def _has_tensors(obj: object) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, dict):
        return any(_has_tensors(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_tensors(v) for v in obj)
    return False


def _prime(optimizer: torch.optim.Optimizer) -> None:
    # The broadcast of optimizer state needs the local state tensors to exist (they are
    # created lazily by the first step). A step on zero gradients creates them; whatever it
    # changes is overwritten by the state loaded right after.
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def load_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any] | None
) -> None:
    """Collective: restore the state given on rank 0 (None elsewhere) on every rank."""
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    # SGD without momentum keeps no per-parameter state: then there is nothing to send.
    optim_tensors = bool(broadcast_object(state is not None and _has_tensors(state["optimizer"])))
    if optim_tensors:
        _prime(optimizer)
    set_model_state_dict(model, state["model"] if state else {}, options=options)
    if optim_tensors:
        set_optimizer_state_dict(
            model, optimizer, state["optimizer"] if state else {}, options=options
        )


def select_optimizer_state(state: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """The part of a name-keyed optimizer state that belongs to the parameters `names`."""
    groups = [
        {**g, "params": [p for p in g["params"] if p in names]} for g in state["param_groups"]
    ]
    return {
        "state": {k: v for k, v in state["state"].items() if k in names},
        "param_groups": groups,
    }
