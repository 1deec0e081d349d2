"""Your own model and data for the bundled trainer (examples/custom-model.yaml and its CPU
twin, which mounts this file from a ConfigMap): trainer.model.factory "tiny_lm:build",
trainer.dataset.factory "tiny_lm:walks", with trainer.codePath the directory holding it.

The trainer seeds torch before calling either, so every process builds the same model
and data. `build` returns an nn.Sequential: its children are the blocks that pipeline
strategies put on their stages. The loss is the trainer's: cross-entropy of the logits
(last dimension) against int64 targets, here the next token at every position.
"""

import torch
from torch import nn


class Residual(nn.Module):
    """x + W2 relu(W1 x): a block whose output has its input's shape."""

    def __init__(self, width: int) -> None:
        super().__init__()
        hidden = 2 * width
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(x)


def build(vocab: int = 64, width: int = 64, depth: int = 2) -> nn.Sequential:
    """Token ids (batch, positions) -> next-token logits: an embedding, `depth` residual
    blocks and a head (depth + 2 blocks)."""
    blocks = [Residual(width) for _ in range(depth)]
    return nn.Sequential(nn.Embedding(vocab, width), *blocks, nn.Linear(width, vocab))


def walks(vocab: int = 64, samples: int = 4096, seq_len: int = 32) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test): walks through a random permutation of the
    vocabulary (each token's successor is fixed), a fifth held out; y is x shifted by one."""
    successor = torch.randperm(vocab)
    tokens = [torch.randint(0, vocab, (samples,))]
    for _ in range(seq_len):
        tokens.append(successor[tokens[-1]])
    seqs = torch.stack(tokens, dim=1)
    x, y = seqs[:, :-1], seqs[:, 1:]
    cut = samples * 4 // 5
    return x[:cut], y[:cut], x[cut:], y[cut:]
