"""Materialising a model that was built on the meta device and sharded with FSDP2.

`fully_shard` on a meta model only records shapes; `to_empty` then allocates each rank's
shards (and nothing else) on the device. The values come from the model's own
initialisation, replayed block by block on the CPU from trainer.seed (`iter_blocks`): each
rank keeps the rows of its shard and drops the block. So the sharded model starts from
exactly the parameters of the model built in one process (the equivalence tests rely on
it), while no rank ever holds more than one full block in host memory or more than its
shards on the device. Replaying the whole stream costs every rank the CPU time of one full
initialisation: the price of bit-identical values with torch's sequential CPU generator.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Shard

from dtjob_trainer.config import TrainerConfig
from dtjob_trainer.models import iter_blocks


def _local_rows(full: torch.Tensor, param: DTensor) -> torch.Tensor:
    """The rows of `full` that this rank's shard of `param` holds (FSDP2: Shard(0) over a
    1-D mesh, torch.chunk boundaries, so the last ranks may hold fewer rows or none)."""
    if param.device_mesh.ndim != 1 or tuple(param.placements) != (Shard(0),):
        raise NotImplementedError(f"placements {param.placements} of a {param.device_mesh}")
    index = param.device_mesh.get_local_rank()
    chunks = torch.chunk(full, param.device_mesh.size(), dim=0)
    return chunks[index] if index < len(chunks) else full[:0]


@torch.no_grad()
def materialize_sharded(
    model: nn.Sequential, cfg: TrainerConfig, dtype: torch.dtype, device: torch.device
) -> None:
    """Allocate `model`'s shards on `device` (a meta model after `fully_shard`) and fill
    them with the values `build_model(cfg, dtype)` would give the whole model."""
    model.to_empty(device=device)
    blocks = iter_blocks(cfg, dtype)
    for index, (sharded, built) in enumerate(zip(model, blocks, strict=True)):
        params: dict[str, torch.Tensor] = dict(sharded.named_parameters())
        for name, value in built.named_parameters():
            param = params[name]
            if isinstance(param, DTensor):
                local = param.to_local()
                rows = _local_rows(value, param)
                if rows.shape != local.shape:
                    raise RuntimeError(
                        f"block {index} parameter {name}: shard {tuple(local.shape)} is not "
                        f"the rows {tuple(rows.shape)} of the full {tuple(value.shape)}"
                    )
                local.copy_(rows)
            else:
                param.copy_(value)
        buffers = dict(sharded.named_buffers())
        for name, buffer in built.named_buffers():
            buffers[name].copy_(buffer)
        del built
