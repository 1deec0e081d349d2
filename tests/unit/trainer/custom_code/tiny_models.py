"""Factories of the tests of trainer.model type Custom and trainer.dataset type Custom,
imported by the trainer from trainer.codePath (this directory) as a user's code would be."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import nn


class Residual(nn.Module):
    """x + tanh(W x): a block whose output has its input's shape."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


def residual_mlp(vocab: int, width: int = 16, depth: int = 2) -> nn.Sequential:
    """Token ids (batch, positions) -> logits (batch, positions, vocab): an embedding,
    `depth` residual blocks and a head, depth + 2 blocks for pipeline stages."""
    blocks = [Residual(width) for _ in range(depth)]
    return nn.Sequential(nn.Embedding(vocab, width), *blocks, nn.Linear(width, vocab))


def residual_mlp_stream(vocab: int, width: int = 16, depth: int = 2) -> Iterator[nn.Module]:
    """residual_mlp's architecture, its blocks yielded one at a time in model order."""
    yield nn.Embedding(vocab, width)
    for _ in range(depth):
        yield Residual(width)
    yield nn.Linear(width, vocab)


def wide_stream(width: int, depth: int, classes: int) -> Iterator[nn.Module]:
    """`depth` wide ReLU layers and a head, yielded one at a time (the memory tests)."""
    for _ in range(depth):
        yield nn.Sequential(nn.Linear(width, width), nn.ReLU())
    yield nn.Linear(width, classes)


def wide_list(width: int, depth: int, classes: int) -> list[nn.Module]:
    """wide_stream's blocks, all made before the first is returned."""
    return list(wide_stream(width, depth, classes))


def stream_failing_at(block: int) -> Iterator[nn.Module]:
    """A generator factory whose code fails while making block `block`."""
    for _ in range(block):
        yield nn.Linear(4, 4)
    raise RuntimeError(f"no weights for layer {block}")


def stream_of(kind: str) -> Iterator[object]:
    """A generator factory that yields something other than a module, or nothing."""
    if kind == "string":
        yield "a layer"


class Whole(nn.Module):
    """A model that is not a sequence of blocks (one block to the trainer)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 8)
        self.head = nn.Linear(8, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))


def whole(vocab: int) -> nn.Module:
    """A non-Sequential model."""
    return Whole(vocab)


def classifier(features: int, classes: int) -> list[nn.Module]:
    """A list of blocks (the trainer wraps it in an nn.Sequential)."""
    return [nn.Sequential(nn.Linear(features, 16), nn.ReLU()), nn.Linear(16, classes)]


def broken(width: int) -> nn.Module:
    """A factory that refuses its arguments."""
    raise ValueError(f"width {width} must be even")


def blobs(n: int, features: int, classes: int) -> tuple[np.ndarray, ...]:
    """(x_train, y_train, x_test, y_test): Gaussian blobs around one centre per class,
    drawn from torch's RNG (the trainer seeds it) so every process gets the same data."""
    centres = torch.randn(classes, features) * 3
    y = torch.randint(0, classes, (n,))
    x = centres[y] + torch.randn(n, features)
    cut = n * 3 // 4
    return x[:cut].numpy(), y[:cut].numpy(), x[cut:].numpy(), y[cut:].numpy()


class Pairs:
    """A map-style data set of (x, y) pairs."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def blob_pairs(n: int, features: int, classes: int) -> tuple[Pairs, Pairs]:
    """The blobs as (train, test) map-style data sets."""
    x, y, xt, yt = (torch.from_numpy(a) for a in blobs(n, features, classes))
    return Pairs(x, y), Pairs(xt, yt)


def image_classifier(size: int, classes: int) -> nn.Sequential:
    """RGB images (batch, 3, size, size) -> class logits, two blocks."""
    flat = 3 * size * size
    return nn.Sequential(
        nn.Sequential(nn.Flatten(), nn.Linear(flat, 16), nn.ReLU()), nn.Linear(16, classes)
    )


def no_data() -> None:
    """A data factory that fails."""
    raise FileNotFoundError("/data/missing.npz")
