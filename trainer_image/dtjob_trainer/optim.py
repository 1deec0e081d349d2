"""The configured optimizer."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from dtjob_api.spec import OptimizerSpec, OptimizerType
from dtjob_trainer.speed import fused_ok


def build_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimizerSpec
) -> torch.optim.Optimizer:
    """SGD (with momentum), Adam or AdamW over `params`; Adam and AdamW use the fused CUDA
    kernel (one launch per step instead of several per tensor) when every parameter is a
    CUDA floating-point tensor, and torch's default implementation otherwise."""
    params = list(params)
    if cfg.type == OptimizerType.SGD:
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weightDecay
        )
    fused = True if fused_ok(params) else None
    if cfg.type == OptimizerType.ADAM:
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weightDecay, fused=fused)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weightDecay, fused=fused)
