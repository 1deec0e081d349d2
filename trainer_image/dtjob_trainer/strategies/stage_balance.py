"""How many of the model's blocks each pipeline stage holds, when the job's stage groups do
not say: contiguous stages whose slowest one is as fast as possible (a pipeline runs at
the pace of its slowest stage), from a cost per block and a speed per stage.

Costs are measured (seconds of a forward and backward of each block on each stage's own
device, `measure_block_costs`) or, before anything is measured, estimated by parameter
count. Pure functions apart from
the measurement, so the split is unit-tested on its own (tests/unit/trainer/test_stage_balance.py).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import torch
from torch import nn


def balance_blocks(
    costs: Sequence[float], stages: int, speeds: Sequence[float] | None = None
) -> list[int]:
    """Blocks per stage (each >= 1, summing to len(costs)) that minimise the largest stage
    time sum(costs of its blocks) / speed(stage); among equal ones, the earlier stages are
    the shorter."""
    speed = list(speeds) if speeds is not None else [1.0] * stages
    if len(speed) != stages or min(speed, default=1.0) <= 0:
        raise ValueError(f"need {stages} positive stage speeds, got {speed}")
    return balance_blocks_by_stage([[c / v for c in costs] for v in speed])


def balance_blocks_by_stage(stage_costs: Sequence[Sequence[float]]) -> list[int]:
    """The same split when every stage has its own cost per block, `stage_costs[s][b]`:
    the time of block b on stage s's device (a CPU stage and a GPU stage time the same
    block differently). Exact dynamic programme, O(blocks^2 x stages): models have at most
    thousands of blocks and this runs once."""
    stages = len(stage_costs)
    n = len(stage_costs[0]) if stages else 0
    if not 1 <= stages <= n or any(len(c) != n for c in stage_costs):
        raise ValueError(f"cannot split {n} blocks into {stages} stages")
    prefix = []
    for costs in stage_costs:
        row = [0.0]
        for c in costs:
            row.append(row[-1] + max(0.0, float(c)))
        prefix.append(row)
    inf = float("inf")
    # best[s][i]: the least bottleneck of stages s.. holding blocks i..n-1; cut[s][i]: where
    # stage s ends then.
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[stages][n] = 0.0
    for s in range(stages - 1, -1, -1):
        left = stages - s  # stages still to fill, each with at least one block
        for i in range(s, n - left + 1):
            for j in range(i + 1, n - left + 2):
                value = max(prefix[s][j] - prefix[s][i], best[s + 1][j])
                if value < best[s][i] - 1e-15 * max(1.0, value):
                    best[s][i], cut[s][i] = value, j
    sizes, i = [], 0
    for s in range(stages):
        j = cut[s][i]
        sizes.append(j - i)
        i = j
    return sizes


def parameter_costs(blocks: Sequence[nn.Module]) -> list[float]:
    """The estimate before measuring: a block's time grows with its parameters (matmuls);
    parameterless blocks count 1 so that they still cost something."""
    return [float(max(1, sum(p.numel() for p in b.parameters()))) for b in blocks]


def measure_block_costs(
    blocks: Sequence[nn.Module],
    x: torch.Tensor,
    device: torch.device | None = None,
    repeats: int = 3,
) -> list[float]:
    """Seconds of a forward and a backward of each block on `x` (passed from block to
    block) on `device` (a copy of the block there, one at a time), the fastest of
    `repeats` runs (the least disturbed by other work)."""
    device = device or torch.device("cpu")
    costs = []
    h = x.to(device)
    for original in blocks:
        block = copy.deepcopy(original).to(device)
        fastest = float("inf")
        out = h
        for _ in range(repeats):
            inp = h.detach().requires_grad_(h.is_floating_point())
            _sync(device)
            start = time.perf_counter()
            out = block(inp)
            out.float().sum().backward()
            _sync(device)
            fastest = min(fastest, time.perf_counter() - start)
        costs.append(fastest)
        h = out.detach()
        del block
    return costs


def _sync(device: torch.device) -> None:
    # CUDA runs asynchronously: time the work, not its launch.
    if device.type == "cuda":
        torch.cuda.synchronize(device)
