"""The MLP on digits: 64 inputs -> hiddenSizes -> 10 classes, ReLU, no BatchNorm or dropout
(so distributed runs equal single-process runs exactly). Each hidden layer is one block
(Linear + ReLU) and the classifier is the last, so the model splits into stages at blocks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch import nn

DIGITS_FEATURES = 64
DIGITS_CLASSES = 10


def build_mlp(hidden_sizes: Sequence[int]) -> Iterator[nn.Module]:
    """The MLP's blocks, in order, each built (and initialised) only when it is reached."""
    width = DIGITS_FEATURES
    for hidden in hidden_sizes:
        yield nn.Sequential(nn.Linear(width, hidden), nn.ReLU())
        width = hidden
    yield nn.Linear(width, DIGITS_CLASSES)
