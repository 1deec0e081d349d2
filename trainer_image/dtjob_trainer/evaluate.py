"""Held-out accuracy."""

from __future__ import annotations

import torch
from torch import nn

from dtjob_trainer.data import Dataset

EVAL_BATCH = 1024


@torch.no_grad()
def accuracy(model: nn.Module, data: Dataset, device: torch.device) -> float:
    """Share of correct predictions on the test split (positions count singly for tokens)."""
    was_training = model.training
    model.eval()
    correct = total = 0
    for start in range(0, data.x_test.shape[0], EVAL_BATCH):
        x = data.x_test[start : start + EVAL_BATCH].to(device)
        y = data.y_test[start : start + EVAL_BATCH].to(device)
        pred = model(x).argmax(dim=-1)
        correct += int((pred == y).sum().item())
        total += y.numel()
    model.train(was_training)
    return correct / max(total, 1)
