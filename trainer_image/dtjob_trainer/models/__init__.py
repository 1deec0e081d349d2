"""Models chosen by config, all built as an `nn.Sequential` of blocks so that pipeline
strategies can cut them into stages (`split_into_stages`) and keep the full model's
parameter names (stage `1` of a 4-block MLP holds "2.0.weight", as the full model does).

Initialisation is a pure function of the seed: the same config builds the same parameters
in every process, with or without distribution.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from dtjob_api.spec import ModelType, TrainerSpec
from dtjob_trainer.config import TrainerConfig
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.models.cnn import build_cnn
from dtjob_trainer.models.custom import FIELD as CUSTOM_FIELD
from dtjob_trainer.models.custom import custom_blocks
from dtjob_trainer.models.gpt import build_gpt, gpt_parameter_count
from dtjob_trainer.models.mlp import build_mlp

__all__ = [
    "build_model",
    "iter_blocks",
    "loss_fn",
    "model_parameter_count",
    "split_into_stages",
    "stage_bounds",
]


def _blocks(t: TrainerSpec) -> Iterable[nn.Module]:
    m = t.model
    if m.type == ModelType.CUSTOM:
        # Block at a time only when the factory yields its blocks (models/custom.py).
        return custom_blocks(t)
    if m.type == ModelType.MLP:
        return build_mlp(m.hiddenSizes)
    if m.type == ModelType.CNN:
        return build_cnn()
    return build_gpt(m.layers, m.dModel, m.heads, m.seqLen, m.vocabSize)


def iter_blocks(cfg: TrainerConfig, dtype: torch.dtype = torch.float32) -> Iterator[nn.Module]:
    """The configured model's blocks on the CPU, in `dtype`, built one at a time from
    trainer.seed: the same values as `build_model`'s blocks, while at most one block exists
    (unless the caller keeps them). The RNG stream is torch's global one, forked, so
    nothing else may draw from it while the iterator is alive."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.trainer.seed)
        for block in _blocks(cfg.trainer):
            yield block.to(dtype)


def build_model(
    cfg: TrainerConfig, dtype: torch.dtype = torch.float32, meta: bool = False
) -> nn.Sequential:
    """The configured model on the CPU, initialised from trainer.seed, in `dtype`; with
    `meta`, on the meta device (shapes only, no memory, no initialisation)."""
    if meta:
        with torch.device("meta"):
            return nn.Sequential(*_blocks(cfg.trainer)).to(dtype)
    return nn.Sequential(*iter_blocks(cfg, dtype))


def stage_bounds(blocks: int, stages: int) -> list[tuple[int, int]]:
    """[start, stop) block ranges of `stages` contiguous, balanced stages (earlier stages
    take the extra block when it does not divide)."""
    if not 1 <= stages <= blocks:
        raise ValueError(f"cannot split {blocks} blocks into {stages} stages")
    base, extra = divmod(blocks, stages)
    bounds: list[tuple[int, int]] = []
    start = 0
    for s in range(stages):
        stop = start + base + (1 if s < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def split_into_stages(model: nn.Sequential, stages: int) -> list[nn.Sequential]:
    """Contiguous stages sharing the model's modules, keeping the full model's names.

    The API's rules guarantee the bundled models enough blocks; a Custom model's are
    counted only here, so too few is the factory's config error (exit 2)."""
    named = list(model.named_children())
    if len(named) < stages:
        raise ConfigError(
            f"{CUSTOM_FIELD}: the model has {len(named)} block(s) (the children of the "
            f"nn.Sequential the factory returns; any other module is one block), fewer than "
            f"the {stages} pipeline stages: return more blocks or use fewer stage processes"
        )
    return [
        nn.Sequential(OrderedDict(named[start:stop]))
        for start, stop in stage_bounds(len(named), stages)
    ]


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every prediction (samples, or samples x positions): logits
    in the last dimension against int64 class or token targets. Custom models train with
    it too, so their output must be logits of that shape."""
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


def model_parameter_count(cfg: TrainerConfig) -> int:
    """Parameters of the configured model, computed without building it (big GPTs)."""
    m = cfg.trainer.model
    if m.type == ModelType.GPT:
        return gpt_parameter_count(m.layers, m.dModel, m.seqLen, m.vocabSize)
    with torch.device("meta"):
        return sum(p.numel() for p in nn.Sequential(*_blocks(cfg.trainer)).parameters())
