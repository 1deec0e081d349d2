"""Megatron-style tensor-parallel plans of the bundled models, as the
`torch.distributed.tensor.parallel.parallelize_module` plans that split them over a 1-D
"tp" DeviceMesh.

A column-split Linear (ColwiseParallel) keeps a slice of the output features: its input is
replicated, its output stays sharded on the last dimension, and nothing is communicated in
the forward (the backward all-reduces the input's gradient). The row-split Linear that
follows (RowwiseParallel) takes that sharded input and all-reduces its partial output. So
every column/row pair costs one all-reduce forward and one backward, and the elementwise
work between them (ReLU, GELU, attention per head) runs on the local slice only.

Parameters become DTensors whose full tensor is the unsplit model's parameter, under the
unsplit model's name, so full checkpoints are layout independent. A model/size that cannot
split evenly never gets here: dtjob_api's rules refuse it when the config loads, naming the
field (heads, hiddenSizes and the CNN against strategy.tensorParallel.size).
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel
from torch.distributed.tensor.placement_types import _StridedShard

from dtjob_api.spec import ModelSpec, ModelType

TPPlan = dict[str, ParallelStyle]

# q, k and v are stacked in one Linear (models/gpt.py): 3 chunks along its output features.
QKV_PARTS = 3


class HeadwiseQKVParallel(ColwiseParallel):
    """Column split of the fused qkv Linear by attention heads.

    A plain column split would give rank 0 all of q and half of k. Instead each of the
    q, k and v blocks is split over the ranks, so rank r holds [q_r; k_r; v_r] (the rows of
    its heads): `_StridedShard(0, split_factor=3)` is exactly that layout, and its full
    tensor is still the unsplit weight. The output keeps the same strided layout, so its
    local tensor is this rank's [q_r, k_r, v_r] features, which Block.forward chunks in 3.
    """

    def __init__(self) -> None:
        super().__init__(output_layouts=_StridedShard(-1, split_factor=QKV_PARTS))

    def _partition_linear_fn(self, name: str, module: nn.Module, device_mesh: DeviceMesh) -> None:
        placement = [_StridedShard(0, split_factor=QKV_PARTS)]
        for pname, param in list(module.named_parameters(recurse=False)):
            shard = nn.Parameter(distribute_tensor(param, device_mesh, placement))
            module.register_parameter(pname, shard)


def gpt_plan(layers: int) -> TPPlan:
    """Every transformer block: qkv split by heads, the attention output projection split
    by rows; the MLP's first Linear by columns, its second by rows. Embedding, LayerNorms
    and the head stay replicated (small next to the blocks at the bundled sizes; their
    gradients come out identical on every tp rank because their inputs and the loss do)."""
    plan: TPPlan = {}
    # Block i is module i + 1 of the Sequential (0 is the embedding).
    for i in range(1, layers + 1):
        plan[f"{i}.qkv"] = HeadwiseQKVParallel()
        plan[f"{i}.proj"] = RowwiseParallel()
        plan[f"{i}.fc"] = ColwiseParallel()
        plan[f"{i}.out"] = RowwiseParallel()
    return plan


def mlp_plan(hidden_layers: int) -> TPPlan:
    """Linears in column/row pairs: hidden layer 2k split by columns (its ReLU runs on the
    slice), the next Linear by rows (one all-reduce). With an even number of hidden layers
    the classifier is left over unpaired and stays replicated."""
    names = [f"{i}.0" for i in range(hidden_layers)] + [str(hidden_layers)]
    plan: TPPlan = {}
    for k in range(0, len(names) - 1, 2):
        plan[names[k]] = ColwiseParallel()
        plan[names[k + 1]] = RowwiseParallel()
    return plan


def stage_plan(m: ModelSpec, names: set[str]) -> TPPlan:
    """The plan of model `m` restricted to one pipeline stage, whose top-level modules are
    `names` (the full model's names). Only column/row pairs that lie wholly inside the
    stage are split, so a stage always takes and hands on full (replicated) activations;
    a pair cut by a stage boundary stays replicated (MLP stages of one hidden layer)."""
    pairs = list(tp_plan(m).items())
    plan: TPPlan = {}
    # Every plan lists its Linears as consecutive (column, row) pairs.
    for (col, col_style), (row, row_style) in zip(pairs[::2], pairs[1::2], strict=True):
        if col.split(".")[0] in names and row.split(".")[0] in names:
            plan[col], plan[row] = col_style, row_style
    return plan


def tp_plan(m: ModelSpec) -> TPPlan:
    """The plan of model `m` (GPT or MLP; the config's rules refuse the CNN)."""
    if m.type == ModelType.GPT:
        return gpt_plan(m.layers)
    if m.type == ModelType.MLP:
        return mlp_plan(len(m.hiddenSizes))
    raise ValueError(f"no tensor-parallel plan for model {m.type}")
