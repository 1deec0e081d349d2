"""Building only a pipeline rank's own stages, never the whole model.

A stage process needs the blocks of its stages (several with Interleaved1F1B), yet their
initial values must be exactly those of the model built whole in one process: the
equivalence tests compare against it, and every rank of a pipeline (and every replica and
tp peer of a stage) must start from the same parameters. `iter_blocks` replays the seeded
initialisation block by block on the CPU; this rank keeps the blocks its stages hold and
drops the others as they are made, so at most its stages plus one block ever exist in the
process. Replaying the whole stream costs every rank the CPU time of one full
initialisation (as meta_init does for FSDP): the price of bit-identical values with torch's
sequential CPU generator.

A Custom model is replayed the same way: its factory is called on the meta device for the
block count and names, then on the CPU. A generator factory makes one block at a time, so a
stage process holds what it does with a bundled model; a factory that returns the whole
model makes it whole once in each stage process (models/custom.py), and the blocks of other
stages are dropped right after.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from dtjob_api.spec import ModelType
from dtjob_trainer.config import TrainerConfig
from dtjob_trainer.models import build_model, iter_blocks, split_into_stages, stage_bounds
from dtjob_trainer.speed import apply_block_options


def build_own_stages(
    cfg: TrainerConfig, dtype: torch.dtype, num_stages: int, indices: list[int]
) -> tuple[list[nn.Sequential], list[str]]:
    """The stages `indices` of the model cut into `num_stages`, on the CPU, with the values
    and full-model names `split_into_stages(build_model(cfg, dtype), num_stages)` gives
    them (blocks checkpointed / compiled as trainer.activationCheckpointing / compile say),
    and the whole model's parameter names in model order (sharded checkpoints list them)."""
    t = cfg.trainer
    # Shapes alone (meta device, no memory) for the names and the block count.
    shapes = build_model(cfg, dtype, meta=True)
    names = [name for name, _ in shapes.named_parameters()]
    if t.model.type == ModelType.CUSTOM:
        # Its blocks are counted only now: too few is the factory's config error.
        split_into_stages(shapes, num_stages)
    mine = _replayed_stages(cfg, dtype, len(shapes), num_stages, indices)
    options = (t.activationCheckpointing, t.compile)
    return [apply_block_options(stage, *options) for stage in mine], names


def _replayed_stages(
    cfg: TrainerConfig, dtype: torch.dtype, blocks: int, num_stages: int, indices: list[int]
) -> list[nn.Sequential]:
    # The API's rules give the bundled models enough blocks for the stages (a Custom
    # model's were counted by the caller).
    bounds = stage_bounds(blocks, num_stages)
    owner = {block: stage for stage in indices for block in range(*bounds[stage])}
    kept: dict[int, OrderedDict[str, nn.Module]] = {stage: OrderedDict() for stage in indices}
    for index, block in enumerate(iter_blocks(cfg, dtype)):
        if index in owner:
            # nn.Sequential(*blocks) names block i "i": the full model's names.
            kept[owner[index]][str(index)] = block
        del block  # another stage's block: dropped before the next one is made
    return [nn.Sequential(kept[stage]) for stage in indices]
