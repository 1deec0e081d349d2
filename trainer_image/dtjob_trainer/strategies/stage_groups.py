"""A heterogeneous pipeline: `roles.stage.groups` puts consecutive stages on different
device kinds (e.g. the embedding and first blocks on CPU pods with much memory, the rest on
GPUs), so a model larger than the GPUs' memory trains without sharding.

Each stage pod runs one process on its group's device (a GPU when the group has one, else
the CPU) and holds `blocks` of the model's blocks (its group's, else a split balanced by
block times measured on each stage's own device, stage_balance.py). Activations and
gradients go between neighbouring stages over c10d point-to-point; with CPU groups the
job's backend is gloo, which moves host memory only, so a GPU stage sends and receives
through host copies (the driver's `wire` device).

Two forms, both on the PipeDream driver (pipedream_stage.py) and the shared training loop:

- synchronous (schedule GPipe or 1F1B; ModelParallel: one micro-batch): 1F1B order with a
  flush, i.e. every micro-batch computes with the live weights W(t) and one update with the
  mean of the micro-batch gradients ends the step. That is exactly a full-batch step.
- asynchronous (schedule PipeDream or PipeDream2BW): forwards and backwards proceed without
  a global flush; PipeDream's weight stashing keeps every backward on its forward's weights.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from dtjob_api.spec import PipelineSchedule, Precision, StrategyType
from dtjob_trainer.config import TrainerConfig
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.data import batch
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.models import loss_fn
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.strategies.pipedream import ASYNC_SCHEDULES, run_pipedream
from dtjob_trainer.strategies.pipedream_schedule import Action, Op, one_f_one_b_order
from dtjob_trainer.strategies.pipedream_stage import PipeDreamStage
from dtjob_trainer.strategies.stage_balance import balance_blocks_by_stage, measure_block_costs

FIELD = "roles.stage.groups"
log = logging.getLogger(__name__)


def flush_actions(num_stages: int, stage: int, microbatches: int, step: int) -> list[Action]:
    """The synchronous form, step `step`: 1F1B order, every forward and backward with the
    live weights W(step), then ONE update with the micro-batches' mean gradient."""
    order = one_f_one_b_order(num_stages, stage, microbatches)
    return [
        *(Action(op, m, step) for op, m in order),
        Action(Op.UPDATE, None, step + 1),
    ]


class GroupStage(PipeDreamStage):
    """The driver without copies for the synchronous form: a forward with the live version
    computes with the live parameters themselves (nothing is stashed)."""

    def _weights(self, version: int) -> list[torch.Tensor]:
        if version not in self.store and version == self.live_version:
            return list(self.params)
        return super()._weights(version)


def stage_groups_of(cfg: TrainerConfig) -> list[int]:
    """The group index of every stage, in pipeline order."""
    stage = cfg.roles.stage
    assert stage is not None and stage.groups
    return [i for i, g in enumerate(stage.groups) for _ in range(g.replicas)]


def configured_blocks(cfg: TrainerConfig) -> list[int] | None:
    """Blocks per stage from the groups, or None when they leave it to balancing."""
    stage = cfg.roles.stage
    assert stage is not None and stage.groups
    if any(g.blocks is None for g in stage.groups):
        return None
    return [stage.groups[i].blocks or 0 for i in stage_groups_of(cfg)]


def split_blocks(model: nn.Sequential, sizes: list[int]) -> list[nn.Sequential]:
    """Contiguous stages of `sizes` blocks, keeping the full model's parameter names.

    The API checks the groups' blocks against the bundled models; a Custom model's blocks
    are known only here."""
    named = list(model.named_children())
    if sum(sizes) != len(named) or min(sizes, default=1) < 1:
        raise ConfigError(
            f"roles.stage.groups: blocks per stage {sizes} do not split the model's "
            f"{len(named)} blocks (a Custom model: the children of what trainer.model.factory "
            "returns) into non-empty stages"
        )
    stages, start = [], 0
    for size in sizes:
        stages.append(nn.Sequential(OrderedDict(named[start : start + size])))
        start += size
    return stages


def stage_device(cfg: TrainerConfig, stage: int) -> torch.device:
    """CUDA for a stage of a group with a GPU, else the CPU."""
    stage_role = cfg.roles.stage
    assert stage_role is not None and stage_role.groups
    index = stage_groups_of(cfg)[stage]
    if stage_role.groups[index].gpus == 0:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        from dtjob_trainer.cuda_diag import diagnose_no_cuda

        raise ConfigError(
            f"{FIELD}[{index}].gpus: the group asks for a GPU but torch sees none: "
            f"{diagnose_no_cuda()}"
        )
    return torch.device("cuda", torch.cuda.current_device())


def balanced_sizes(ctx: RunContext, model: nn.Sequential, device: torch.device) -> list[int]:
    """Every stage times a forward + backward of each block on one micro-batch on its own
    device; the split minimises the slowest stage by those times (a GPU stage takes more
    blocks than a CPU one). All ranks compute the same split from the gathered times."""
    cfg = ctx.cfg
    micro = max(1, cfg.trainer.batchSize // cfg.pipeline.microbatches)
    x, _ = batch(ctx.data, 0, micro, cfg.trainer.seed)
    mine = measure_block_costs(list(model.children()), x, device)
    everyone: list[list[float] | None] = [None] * ctx.world_size
    dist.all_gather_object(everyone, mine)
    return balance_blocks_by_stage([c or [] for c in everyone])


def _autocast(cfg: TrainerConfig, device: torch.device) -> Callable[[], object] | None:
    if cfg.trainer.precision != Precision.BF16:
        return None
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)


def run(ctx: RunContext) -> RunResult:
    """Train the heterogeneous pipeline over every stage rank (rank = stage)."""
    cfg = ctx.cfg
    n, rank = ctx.world_size, ctx.rank
    model = ctx.build_model()
    device = stage_device(cfg, rank)
    sizes = configured_blocks(cfg) or balanced_sizes(ctx, model, device)
    module = split_blocks(model, sizes)[rank].to(device)
    optimizer = build_optimizer(list(module.parameters()), cfg.trainer.optimizer)
    # gloo moves host memory only: a GPU stage sends and receives through the CPU.
    wire = torch.device("cpu") if ctx.backend == "gloo" else device
    driver = GroupStage(
        module, rank, n, device, loss_fn, optimizer.step, _autocast(cfg, device), wire
    )
    schedule = cfg.pipeline.schedule
    microbatches = cfg.pipeline.microbatches
    if cfg.strategy.type == StrategyType.MODEL_PARALLEL:
        schedule, microbatches = PipelineSchedule.GPIPE, 1
    ctx.strategy_name = ctx.strategy_name or str(cfg.strategy.type)
    if rank == 0:
        log.info("stage groups: blocks per stage %s, this stage on %s", sizes, device)
    if schedule in ASYNC_SCHEDULES:
        result = run_pipedream(ctx, schedule, microbatches, built=(driver, optimizer))
    else:
        result = run_pipedream(
            ctx,
            PipelineSchedule.GPIPE,
            microbatches,
            built=(driver, optimizer),
            actions=lambda s: flush_actions(n, rank, microbatches, s),
        )
    return result
