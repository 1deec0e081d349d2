"""The configured optimizer."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from dtjob_api.spec import OptimizerSpec, OptimizerType


def build_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimizerSpec
) -> torch.optim.Optimizer:
    """SGD (with momentum), Adam or AdamW over `params`."""
    if cfg.type == OptimizerType.SGD:
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weightDecay
        )
    if cfg.type == OptimizerType.ADAM:
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weightDecay)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weightDecay)
