"""Final evaluation streams the test set in chunks whose output stays under a budget, so its
peak memory does not grow with the test set; the accuracy is that of one big batch. Compiled
blocks (trainer.compile) are scored eagerly, never compiled again for the one pass."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dtjob_trainer.data import Dataset
from dtjob_trainer.evaluate import accuracy, chunk_rows

CPU = torch.device("cpu")
SEQ, VOCAB = 16, 64  # one sample's logits: 16 x 64 fp32 = 4 KiB


class Recorder(nn.Module):
    """A token model (embedding + linear head, real logits) that records the largest
    output it ever produced: what one chunk of evaluation holds at once."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Embedding(VOCAB, 8), nn.Linear(8, VOCAB))
        self.peak_bytes = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        self.peak_bytes = max(self.peak_bytes, out.element_size() * out.numel())
        return out


def tokens(n: int) -> Dataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    y = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    return Dataset(x[:1], y[:1], x, y)


def one_batch_accuracy(model: nn.Module, data: Dataset) -> float:
    with torch.no_grad():
        pred = model(data.x_test).argmax(dim=-1)
    return int((pred == data.y_test).sum()) / data.y_test.numel()


def test_chunk_rows_fit_the_budget() -> None:
    assert chunk_rows(4096, 2**20) == 256
    assert chunk_rows(2**30, 2**20) == 1  # a sample larger than the budget still runs
    assert chunk_rows(0, 100) == 100


def test_peak_output_is_bounded_whatever_the_test_set_size() -> None:
    budget = 64 * 2**10  # 16 samples of 4 KiB
    peaks = []
    for n in (100, 5_000):
        model, data = Recorder(), tokens(n)
        streamed = accuracy(model, data, CPU, output_bytes=budget)
        peaks.append(model.peak_bytes)
        assert streamed == one_batch_accuracy(model, data)
    assert peaks[0] == peaks[1] <= budget
    # Without chunking, the larger set's logits alone would be 5,000 x 4 KiB = 20 MiB.


def test_eval_samples_caps_what_is_scored() -> None:
    model, data = Recorder(), tokens(500)
    capped = Dataset(data.x_train, data.y_train, data.x_test[:40], data.y_test[:40])
    assert accuracy(model, data, CPU, limit=40) == one_batch_accuracy(model, capped)


def test_evaluation_restores_training_mode() -> None:
    model = Recorder()
    model.train()
    accuracy(model, tokens(10), CPU)
    assert model.training


class Block(nn.Module):
    """A model block of our own (dynamo leaves torch.nn's own modules' frames alone)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(x)
        return out


def test_compiled_blocks_are_scored_eagerly_and_never_compiled_again() -> None:
    # Scored compiled, a trainer.compile run compiled every graph twice more for the final
    # pass (no_grad, then the chunks' batch sizes); eagerly, the accuracy is the same.
    compiled: list[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        compiled.append(len(example_inputs))
        return gm.forward

    model = Recorder()
    model.net = nn.Sequential(*(Block(layer) for layer in model.net))
    for block in model.net:
        block.compile(backend=backend)
    data = tokens(40)
    want = one_batch_accuracy(Recorder(), data)
    assert accuracy(model, data, CPU, output_bytes=4 * 1024 * 10) == want
    assert compiled == []
    model.net(data.x_test[:2])  # outside the scoring the blocks are compiled
    assert compiled
