"""The MLP on digits: 64 inputs -> hiddenSizes -> 10 classes, ReLU, no BatchNorm or dropout
(so distributed runs equal single-process runs exactly). Each hidden layer is one block
(Linear + ReLU) and the classifier is the last, so the model splits into stages at blocks."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

DIGITS_FEATURES = 64
DIGITS_CLASSES = 10


def build_mlp(hidden_sizes: Sequence[int]) -> list[nn.Module]:
    """The MLP's blocks, in order."""
    blocks: list[nn.Module] = []
    width = DIGITS_FEATURES
    for hidden in hidden_sizes:
        blocks.append(nn.Sequential(nn.Linear(width, hidden), nn.ReLU()))
        width = hidden
    blocks.append(nn.Linear(width, DIGITS_CLASSES))
    return blocks
