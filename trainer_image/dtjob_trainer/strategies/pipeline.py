"""Pipeline: the model's blocks cut into stages over the stage ranks, each global batch cut
into micro-batches that flow through them (torch.distributed.pipelining).

Schedules: GPipe (all forwards, then all backwards), 1F1B (one forward, one backward in the
steady state: at most `stages` micro-batches of activations alive per rank) and
Interleaved1F1B (`stagesPerRank` model chunks per rank, assigned round-robin: rank r holds
stages r, r + pp, r + 2 pp, ...). The loss is the mean over each micro-batch and the schedule
divides the gradients by the number of micro-batches (`scale_grads=True`), so one step
equals a full-batch step of the whole model.

`PipelinePlan` and `build_pipeline` are shared with ModelParallel (GPipe with one
micro-batch) and Hybrid (one pipeline per data-parallel replica); `run_pipeline` wires a
pipeline into the training loop. Rank 0 holds stage 0; the loss lives on the rank holding
the last stage, and the loop's all-reduce brings it to rank 0. With a `StageTP`
(strategies/pipeline_tp.py: Pipeline and Hybrid with strategy.tensorParallel) every stage
is split over its tp peers (strategies/stage_tp.py).

Each process builds only its own stages (strategies/stage_build.py) and checkpoints are
sharded: every stage rank writes its own blocks under the full model's names, in FSDP's
layout (strategies/stage_ckpt.py), so a checkpoint resumes at another stage count, dp
size or tp size, under FSDP, CPUOffload or DataParallel, and back. Full checkpoints of
earlier versions still load (`load_state_dict`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)
from torch.distributed.pipelining.schedules import _PipelineSchedule
from torch.distributed.pipelining.stage import _PipelineStageBase

from dtjob_api.spec import PipelineSchedule
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.data import batch
from dtjob_trainer.dist import broadcast_object
from dtjob_trainer.evaluate import scored_rows, scoring
from dtjob_trainer.loop import Trainable, run_loop
from dtjob_trainer.models import loss_fn, split_into_stages
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.state import select_optimizer_state
from dtjob_trainer.strategies.stage_build import build_own_stages
from dtjob_trainer.strategies.stage_ckpt import StageShardedState
from dtjob_trainer.strategies.stage_tp import (
    StageTP,
    full_stage_state,
    load_stage_state,
    parallelize_stage,
)
from dtjob_trainer.strategies.tensor_parallel import average_over_dp

NAME = "Pipeline"


@dataclass(frozen=True)
class PipelinePlan:
    """Where this rank sits in one pipeline."""

    schedule: PipelineSchedule
    microbatches: int
    pp_size: int
    pp_rank: int
    stages_per_rank: int = 1
    """Model chunks per rank (Interleaved1F1B only; 1 otherwise)."""

    @property
    def num_stages(self) -> int:
        """Stages the model is cut into."""
        return self.pp_size * self.stages_per_rank

    def stage_indices(self) -> list[int]:
        """Stages held by this rank, round-robin (the order Interleaved1F1B expects)."""
        return [self.pp_rank + k * self.pp_size for k in range(self.stages_per_rank)]

    @property
    def has_first(self) -> bool:
        """This rank holds stage 0 and feeds the inputs."""
        return self.pp_rank == 0

    @property
    def has_last(self) -> bool:
        """This rank holds the last stage, computes the loss and gets the outputs."""
        return self.pp_rank == self.pp_size - 1


def make_plan(
    schedule: PipelineSchedule, microbatches: int, stages_per_rank: int, pp_size: int, pp_rank: int
) -> PipelinePlan:
    """This rank's plan under one of torch's schedules. The sizes torch needs (1F1B's
    micro-batches >= stages, Interleaved1F1B's full rounds) are dtjob_api's rules, checked
    when the config loads."""
    if schedule in (PipelineSchedule.PIPEDREAM, PipelineSchedule.PIPEDREAM_2BW):
        raise ValueError(f"{schedule} runs on its own driver (strategies/pipedream.py)")
    chunks = stages_per_rank if schedule == PipelineSchedule.INTERLEAVED_1F1B else 1
    return PipelinePlan(schedule, microbatches, pp_size, pp_rank, chunks)


def local_module(stages: list[nn.Sequential]) -> nn.Sequential:
    """This rank's stages as one module whose parameter names are the full model's (for
    the optimizer and checkpoints; never called, the schedule runs the stages)."""
    children: OrderedDict[str, nn.Module] = OrderedDict()
    for stage in stages:
        children.update(stage.named_children())
    return nn.Sequential(children)


def build_pipeline(
    model: nn.Sequential,
    plan: PipelinePlan,
    device: torch.device,
    group: dist.ProcessGroup | None = None,
    tp: StageTP | None = None,
) -> tuple[_PipelineSchedule, list[nn.Sequential]]:
    """The schedule and this rank's stage modules (moved to `device`, split over `tp`
    when given) for `plan`, cut from the whole `model` (tests; training builds only its
    own stages and calls `schedule_stages`)."""
    all_stages = split_into_stages(model, plan.num_stages)
    return schedule_stages([all_stages[i] for i in plan.stage_indices()], plan, device, group, tp)


def schedule_stages(
    modules: list[nn.Sequential],
    plan: PipelinePlan,
    device: torch.device,
    group: dist.ProcessGroup | None = None,
    tp: StageTP | None = None,
) -> tuple[_PipelineSchedule, list[nn.Sequential]]:
    """The schedule of `plan` over this rank's stage `modules` (`plan.stage_indices()`, in
    order), and the modules moved to `device` and split over `tp` when given."""
    mine = [module.to(device) for module in modules]
    if tp is not None:
        mine = [parallelize_stage(module, tp) for module in mine]
    stages: list[_PipelineStageBase] = [
        PipelineStage(module, index, plan.num_stages, device, group=group)
        for module, index in zip(mine, plan.stage_indices(), strict=True)
    ]
    schedule: _PipelineSchedule
    if plan.schedule == PipelineSchedule.INTERLEAVED_1F1B:
        schedule = ScheduleInterleaved1F1B(stages, plan.microbatches, loss_fn=loss_fn)
    elif plan.schedule == PipelineSchedule.ONE_F_ONE_B:
        schedule = Schedule1F1B(stages[0], plan.microbatches, loss_fn=loss_fn)
    else:
        schedule = ScheduleGPipe(stages[0], plan.microbatches, loss_fn=loss_fn)
    return schedule, mine


def pipeline_step(
    schedule: _PipelineSchedule,
    plan: PipelinePlan,
    x: torch.Tensor,
    y: torch.Tensor,
    train: bool = True,
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """One pass of the batch (x, y) through the pipeline: forward and backward when
    `train`, forward only otherwise. Returns the per-micro-batch losses and the outputs,
    both on the last-stage rank only (empty list and None elsewhere). Every rank of the
    pipeline passes its batch; only the first stage reads x and only the last reads y."""
    losses: list[torch.Tensor] = []
    args = (x,) if plan.has_first else ()
    target = y if plan.has_last else None
    run = schedule.step if train else schedule.eval
    out = run(*args, target=target, losses=losses)
    return losses, out if plan.has_last else None


@torch.no_grad()
def pipeline_accuracy(
    schedule: _PipelineSchedule,
    plan: PipelinePlan,
    x: torch.Tensor,
    y: torch.Tensor,
    chunk: int,
    device: torch.device,
) -> float | None:
    """Held-out accuracy through the pipeline (forward only), on the last-stage rank.

    The set goes through in chunks of `chunk` samples (the training batch of one pipeline:
    memory known to fit), moved to the device one at a time, never all at once. The
    schedule needs equal micro-batches, so a short last chunk is padded with its first
    sample and the padding is not scored. Every rank of the pipeline runs the same chunks."""
    chunk = max(plan.microbatches, chunk - chunk % plan.microbatches)
    n = x.shape[0]
    correct = 0
    with scoring(device):
        for start in range(0, n, chunk):
            xs, ys = x[start : start + chunk], y[start : start + chunk]
            rows = xs.shape[0]
            if pad := chunk - rows:
                xs = torch.cat([xs, xs[:1].expand(pad, *xs.shape[1:])])
                ys = torch.cat([ys, ys[:1].expand(pad, *ys.shape[1:])])
            _, out = pipeline_step(schedule, plan, xs.to(device), ys.to(device), train=False)
            if out is not None:
                pred = out[:rows].argmax(dim=-1)
                correct += int((pred == ys[:rows].to(device)).sum().item())
    if not plan.has_last:
        return None
    per_sample = y[0].numel() if y.dim() > 1 else 1
    return correct / max(n * per_sample, 1)


def run_pipeline(
    ctx: RunContext,
    plan: PipelinePlan,
    name: str,
    pp_group: dist.ProcessGroup | None = None,
    dp_group: dist.ProcessGroup | None = None,
    dp_rank: int = 0,
    dp_size: int = 1,
    tp: StageTP | None = None,
) -> RunResult:
    """Train with the pipeline of `plan` through the shared loop. With `dp_size` > 1 there
    is one pipeline per data-parallel replica (rank order pp_index * dp + dp_index): each
    takes shard `dp_rank` of the global batch and the gradients are averaged over
    `dp_group` before the optimizer step. With `tp` every stage is split over tp peers
    (rank order (pp_index * dp + dp_index) * tp + tp_index)."""
    cfg = ctx.cfg.trainer
    device = ctx.device
    # Only this rank's stages are ever built (strategies/stage_build.py).
    own, names = build_own_stages(ctx.cfg, ctx.dtype, plan.num_stages, plan.stage_indices())
    schedule, stages = schedule_stages(own, plan, device, pp_group, tp)
    del own
    local = local_module(stages)
    params = list(local.parameters())
    optimizer = build_optimizer(params, cfg.optimizer)
    tp_size, tp_rank = (tp.mesh.size(), tp.rank) if tp is not None else (1, 0)
    # Ranks of the pipeline of replica 0: they hold the state that is saved and evaluated.
    last_rank_of_replica0 = (plan.pp_size - 1) * dp_size * tp_size

    def step(s: int) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(ctx.data, s, cfg.batchSize, cfg.seed, dp_rank, dp_size)
        with ctx.autocast():
            losses, _ = pipeline_step(schedule, plan, x.to(device), y.to(device))
        if tp is not None:
            # Gradients of split parameters are DTensors: averaged shard by shard.
            average_over_dp(params, dp_group, dp_size)
        elif dp_size > 1:
            average_gradients(params, dp_group, dp_size)
        optimizer.step()
        # The tp peers of the last stage computed the same losses: one of them reports.
        if not losses or tp_rank != 0:
            return torch.zeros((), dtype=torch.float64)
        # This replica's mean loss over its micro-batches, as its share of the global mean.
        return torch.stack([loss.detach() for loss in losses]).mean().double().cpu() / dp_size

    def state_dict() -> dict[str, Any] | None:
        # The whole state gathered on rank 0: the loop asks for it for the result file
        # only, since checkpoints are sharded.
        mine = None
        if dp_rank == 0 and tp is not None:
            full = full_stage_state(local, optimizer)  # collective over the tp peers
            mine = full if tp_rank == 0 else None
        elif dp_rank == 0:
            mine = {
                "model": {k: v.detach().cpu().clone() for k, v in local.state_dict().items()},
                "optimizer": get_optimizer_state_dict(
                    local, optimizer, options=StateDictOptions(cpu_offload=True)
                ),
            }
        parts: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
        dist.gather_object(mine, parts, dst=0)
        if parts is None:
            return None
        return merge_stage_states([p for p in parts if p is not None])

    def load_state_dict(state: dict[str, Any] | None) -> None:
        state = broadcast_object(state)
        assert state is not None
        names = set(local.state_dict())
        model = {k: v for k, v in state["model"].items() if k in names}
        optim = select_optimizer_state(state["optimizer"], names)
        if tp is not None:
            load_stage_state(local, optimizer, {"model": model, "optimizer": optim})
            return
        local.load_state_dict(model)
        set_optimizer_state_dict(local, optimizer, optim_state_dict=optim)

    def evaluate() -> float | None:
        acc = None
        if dp_rank == 0:
            data = ctx.data
            n = scored_rows(data, cfg.dataset.evalSamples)
            acc = pipeline_accuracy(
                schedule, plan, data.x_test[:n], data.y_test[:n], cfg.batchSize // dp_size, device
            )
        box = torch.tensor([acc if acc is not None else 0.0], dtype=torch.float64, device=device)
        dist.broadcast(box, src=last_rank_of_replica0)
        return float(box.item()) if ctx.rank == 0 else None

    return run_loop(
        ctx,
        Trainable(
            name=name,
            step=step,
            state_dict=state_dict,
            # Checkpoints are sharded, every stage rank writing its own blocks
            # (strategies/stage_ckpt.py); full ones of earlier versions still load.
            load_state_dict=load_state_dict,
            sharded=StageShardedState(local, optimizer, names),
            save_sharded=True,
            evaluate=evaluate,
            samples_per_step=cfg.batchSize,
        ),
    )


def average_gradients(
    params: list[nn.Parameter], group: dist.ProcessGroup | None, size: int
) -> None:
    """Average the gradients of `params` over `group` in one flat all-reduce."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat.div_(size)
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()


def merge_stage_states(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One checkpoint from the stage ranks' states: model parameters by full-model name,
    and the optimizer state in torch.distributed.checkpoint's name-keyed form (so it loads
    into a single-process model as well as into another pipeline layout)."""
    model: dict[str, torch.Tensor] = {}
    optim_state: dict[str, Any] = {}
    group: dict[str, Any] | None = None
    for part in parts:
        model.update(part["model"])
        optim_state.update(part["optimizer"]["state"])
        for g in part["optimizer"]["param_groups"]:
            if group is None:
                group = {**g, "params": []}
            group["params"] += list(g["params"])
    ordered = dict(sorted(model.items(), key=lambda kv: _name_key(kv[0])))
    groups = [] if group is None else [group]
    return {"model": ordered, "optimizer": {"state": optim_state, "param_groups": groups}}


def _name_key(name: str) -> tuple[tuple[int, int, str], ...]:
    # "10.weight" after "2.weight": blocks in model order.
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split("."))


def run(ctx: RunContext) -> RunResult:
    """Train with a pipeline over every stage rank of the job."""
    p = ctx.cfg.pipeline
    if p.schedule in (PipelineSchedule.PIPEDREAM, PipelineSchedule.PIPEDREAM_2BW):
        # Imported here: the asynchronous driver imports this module's checkpoint helpers.
        from dtjob_trainer.strategies.pipedream import run_pipedream

        return run_pipedream(ctx, p.schedule, p.microbatches)
    plan = make_plan(p.schedule, p.microbatches, p.stagesPerRank, ctx.world_size, ctx.rank)
    return run_pipeline(ctx, plan, ctx.strategy_name or NAME)
