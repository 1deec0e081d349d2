"""Held-out accuracy, streamed in bounded chunks.

A model's output for a whole test set can be tens of GiB (a GPT's fp32 logits are
seq_len x vocab floats per sample: 1,024 sequences of the examples' GPT are ~31 GiB), so
the set is never pushed through at once: chunks are sized so that one chunk's output
stays under `output_bytes`, each is reduced to its argmax at once, inputs move to the
device one chunk at a time, and on CUDA the forward runs under bf16 autocast. At most
`limit` samples (spec.trainer.dataset.evalSamples, the first ones of the held-out split)
are scored. On the CPU, chunking changes nothing but the batch size: predictions are per
sample, so the accuracy is the same as in one batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from dtjob_trainer.data import Dataset

if TYPE_CHECKING:
    from dtjob_trainer.context import RunContext

EVAL_OUTPUT_BYTES = 256 * 2**20
"""Budget of one chunk's model output; activations inside the model scale the same way."""
FIRST_CHUNK = 8
"""Rows of the first chunk, which measures the output size per sample."""


def scored_rows(data: Dataset, limit: int | None) -> int:
    """How many held-out samples are scored."""
    n = int(data.x_test.shape[0])
    return n if limit is None else min(n, limit)


def chunk_rows(bytes_per_sample: int, output_bytes: int) -> int:
    """Rows per chunk whose output fits the budget (at least one)."""
    return max(1, output_bytes // max(1, bytes_per_sample))


def eval_autocast(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """bf16 autocast on CUDA (half the activation memory; argmax barely moves); none on the
    CPU, where the equivalence tests compare strategies bit for bit."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def scoring(device: torch.device) -> Iterator[None]:
    """How the held-out set is scored: under `eval_autocast`, and with compiled blocks
    (trainer.compile) run eagerly. Scored compiled, every compiled graph would be compiled
    again for the one pass (no_grad is another graph, and the chunks' batch sizes then a
    dynamic one): two more compilations of each, which on the CPU took a quarter of a
    compiled run's CPU time (a 4-step GPT job over 2 ranks: 37 CPU-s, 28 scored eagerly)."""
    with torch.compiler.set_stance("force_eager"), eval_autocast(device):
        yield


@torch.no_grad()
def accuracy(
    model: nn.Module,
    data: Dataset,
    device: torch.device,
    limit: int | None = None,
    output_bytes: int = EVAL_OUTPUT_BYTES,
) -> float:
    """Share of correct predictions on the test split (positions count singly for tokens).

    Deterministic chunking: every rank of a sharded model (FSDP) runs the same chunks, so
    the collectives inside its forward pair up."""
    was_training = model.training
    model.eval()
    n = scored_rows(data, limit)
    correct = total = 0
    start, rows = 0, FIRST_CHUNK
    with scoring(device):
        while start < n:
            stop = min(n, start + rows)
            out = model(data.x_test[start:stop].to(device, non_blocking=True))
            per_sample = out.element_size() * (out.numel() // max(1, out.shape[0]))
            pred = out.argmax(dim=-1)
            del out  # the logits go before the next chunk's are made
            y = data.y_test[start:stop].to(device, non_blocking=True)
            correct += int((pred == y).sum().item())
            total += y.numel()
            start, rows = stop, chunk_rows(per_sample, output_bytes)
    model.train(was_training)
    return correct / max(total, 1)


def final_accuracy(model: nn.Module, ctx: RunContext) -> float:
    """The job's final held-out accuracy (capped by spec.trainer.dataset.evalSamples)."""
    return accuracy(model, ctx.data, ctx.device, ctx.cfg.trainer.dataset.evalSamples)
