"""A GPT-style decoder on token sequences: an embedding block, `layers` pre-norm
transformer blocks (causal self-attention + 4x GELU MLP) and a head block. Sizes range from
tiny (CI) to about 1B parameters (layers=24, dModel=2048). No dropout: runs are exact."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


class Embedding(nn.Module):
    """Token plus learned position embeddings: (batch, seq) ids -> (batch, seq, d_model)."""

    def __init__(self, vocab_size: int, seq_len: int, d_model: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(seq_len, d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Embed token ids."""
        pos = torch.arange(ids.shape[1], device=ids.device)
        out: torch.Tensor = self.tokens(ids) + self.positions(pos)[None]
        return out


class Block(nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal self-attention then MLP, each with a residual connection."""
        b, t, d = x.shape
        # Sizes from the qkv output, not from d and self.heads: under tensor parallelism
        # this rank's qkv holds [q; k; v] of its own heads only (3 * d / tp features).
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=2)
        head_dim = d // self.heads
        q, k, v = (z.view(b, t, -1, head_dim).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, -1))
        out: torch.Tensor = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return out


class Head(nn.Module):
    """Final LayerNorm and the projection to vocabulary logits (untied, so stages split)."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.lm = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (batch, seq, vocab)."""
        out: torch.Tensor = self.lm(self.ln(x))
        return out


def build_gpt(
    layers: int, d_model: int, heads: int, seq_len: int, vocab: int
) -> Iterator[nn.Module]:
    """The decoder's blocks, in order, each built (and initialised) only when it is reached:
    sharded materialisation holds one full block at a time, never the whole model."""
    yield Embedding(vocab, seq_len, d_model)
    for _ in range(layers):
        yield Block(d_model, heads)
    yield Head(d_model, vocab)


def gpt_parameter_count(layers: int, d_model: int, seq_len: int, vocab: int) -> int:
    """Parameters of build_gpt without building it (for Auto and benchmarks)."""
    per_block = 12 * d_model * d_model + 13 * d_model
    return vocab * d_model + seq_len * d_model + layers * per_block + 2 * d_model + d_model * vocab
