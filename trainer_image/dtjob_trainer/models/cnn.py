"""A small CNN on digits seen as 1x8x8 images, in four blocks (two convolutions, two
dense layers) so that it splits into 2 or 4 stages."""

from __future__ import annotations

from torch import nn

from dtjob_trainer.models.mlp import DIGITS_CLASSES


def build_cnn() -> list[nn.Module]:
    """The CNN's blocks, in order. Input: (batch, 64) flat digits."""
    return [
        nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU()),
        nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU()),
        nn.Linear(64, DIGITS_CLASSES),
    ]
