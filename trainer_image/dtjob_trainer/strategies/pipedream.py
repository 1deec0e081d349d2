"""Pipeline schedules PipeDream and PipeDream2BW: asynchronous pipelines with weight
versions (pipedream_schedule says which version each micro-batch uses, pipedream_stage
runs it), wired into the shared training loop.

Checkpoints: the pipeline drains at every step boundary, so a PipeDream checkpoint is the
live weights and optimizer state (nothing is stashed between steps); a 2BW checkpoint adds
the shadow buffer W(t-1) under "shadow" (full-model names, like "model"), which the next
step's micro-batches compute with. Resuming without a shadow (another strategy's
checkpoint) starts 2BW afresh from the loaded weights: W(t-1) = W(t).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from dtjob_api.spec import PipelineSchedule
from dtjob_trainer.context import RunContext, RunResult
from dtjob_trainer.data import batch
from dtjob_trainer.dist import broadcast_object
from dtjob_trainer.evaluate import scored_rows, scoring
from dtjob_trainer.loop import Trainable, run_loop
from dtjob_trainer.models import loss_fn
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.state import select_optimizer_state
from dtjob_trainer.strategies.pipedream_schedule import (
    Action,
    pipedream_actions,
    two_bw_actions,
)
from dtjob_trainer.strategies.pipedream_stage import PipeDreamStage
from dtjob_trainer.strategies.pipeline import merge_stage_states
from dtjob_trainer.strategies.stage_build import build_own_stages

ASYNC_SCHEDULES = (PipelineSchedule.PIPEDREAM, PipelineSchedule.PIPEDREAM_2BW)


def step_actions(
    schedule: PipelineSchedule, num_stages: int, stage: int, microbatches: int, step: int
) -> list[Action]:
    """The actions of `stage` in step `step` under an asynchronous schedule."""
    if schedule == PipelineSchedule.PIPEDREAM:
        return pipedream_actions(num_stages, stage, microbatches, step)
    return two_bw_actions(num_stages, stage, microbatches, step)


def live_version_at(schedule: PipelineSchedule, step: int, microbatches: int) -> int:
    """The version of the live weights when step `step` starts."""
    return step * microbatches if schedule == PipelineSchedule.PIPEDREAM else step


def initial_store(
    schedule: PipelineSchedule,
    step: int,
    shadow: dict[str, torch.Tensor],
    live: dict[str, torch.Tensor],
) -> dict[int, dict[str, torch.Tensor]]:
    """The store when training (re)starts at `step`: empty, except for 2BW past step 0,
    where the shadow W(step - 1) comes from the checkpoint or, when it has none (another
    strategy's checkpoint), is the live weights: 2BW starts afresh there."""
    if schedule != PipelineSchedule.PIPEDREAM_2BW or step == 0:
        return {}
    return {step - 1: shadow if set(shadow) == set(live) else live}


def build_stage(
    ctx: RunContext, num_stages: int, stage: int
) -> tuple[PipeDreamStage, torch.optim.Optimizer]:
    """This rank's stage of the configured model, on the device, with its optimizer. Only
    this stage's blocks are built (strategies/stage_build.py)."""
    own, _ = build_own_stages(ctx.cfg, ctx.dtype, num_stages, [stage])
    module = own[0].to(ctx.device)
    optimizer = build_optimizer(list(module.parameters()), ctx.cfg.trainer.optimizer)
    driver = PipeDreamStage(
        module, stage, num_stages, ctx.device, loss_fn, optimizer.step, ctx.autocast
    )
    return driver, optimizer


def run_pipedream(
    ctx: RunContext,
    schedule: PipelineSchedule,
    microbatches: int,
    built: tuple[PipeDreamStage, torch.optim.Optimizer] | None = None,
    actions: Callable[[int], list[Action]] | None = None,
) -> RunResult:
    """Train with an asynchronous pipeline over every stage rank of the job (rank = stage).

    `built` (a stage driver and its optimizer) and `actions` (a step's actions) replace
    the default stage and schedule: the stage groups' pipeline (stage_groups.py) runs its
    per-device stages and its flushing schedule through this same loop."""
    cfg = ctx.cfg.trainer
    n, rank = ctx.world_size, ctx.rank
    driver, optimizer = built or build_stage(ctx, n, rank)
    module = driver.module

    # The checkpoint does not say its step; the first step run by this process sets the
    # version counter (and 2BW's shadow) from it.
    loaded_shadow: dict[str, torch.Tensor] = {}
    started = False

    def step(s: int) -> torch.Tensor:
        nonlocal started
        if not started:
            started = True
            live = {k: p.detach().clone() for k, p in module.named_parameters()}
            store = initial_store(schedule, s, loaded_shadow, live)
            driver.restore(live_version_at(schedule, s, microbatches), store)
            # Not held through the first step (when the optimizer's state is made too):
            # what the store kept of it stays, the rest is a whole copy of the stage.
            del live, store
        x, y = batch(ctx.data, s, cfg.batchSize, cfg.seed)
        losses = driver.run(
            actions(s) if actions else step_actions(schedule, n, rank, microbatches, s),
            x.to(driver.device) if driver.is_first else None,
            y.to(driver.device) if driver.is_last else None,
            microbatches,
        )
        if not losses:
            return torch.zeros((), dtype=torch.float64)
        return torch.stack(losses).mean().double().cpu()

    def state_dict() -> dict[str, Any] | None:
        # 2BW's store holds exactly the shadow between steps; PipeDream's is empty.
        shadow = next(iter(driver.stored().values()), {})
        mine = {
            "model": {k: v.detach().cpu().clone() for k, v in module.state_dict().items()},
            "shadow": {k: v.cpu().clone() for k, v in shadow.items()},
            "optimizer": get_optimizer_state_dict(
                module, optimizer, options=StateDictOptions(cpu_offload=True)
            ),
        }
        parts: list[Any] | None = [None] * n if rank == 0 else None
        dist.gather_object(mine, parts, dst=0)
        if parts is None:
            return None
        return _merge(parts)

    def load_state_dict(state: dict[str, Any] | None) -> None:
        state = broadcast_object(state)
        assert state is not None
        names = set(module.state_dict())
        module.load_state_dict({k: v for k, v in state["model"].items() if k in names})
        set_optimizer_state_dict(
            module, optimizer, optim_state_dict=select_optimizer_state(state["optimizer"], names)
        )
        loaded_shadow.clear()
        loaded_shadow.update({k: v for k, v in (state.get("shadow") or {}).items() if k in names})

    def evaluate() -> float | None:
        data = ctx.data
        rows = scored_rows(data, cfg.dataset.evalSamples)
        correct = 0
        with scoring(driver.device):
            for start in range(0, rows, cfg.batchSize):
                xs = data.x_test[start : min(rows, start + cfg.batchSize)].to(driver.device)
                out = driver.forward_only(xs if driver.is_first else None)
                if out is not None:
                    ys = data.y_test[start : start + out.shape[0]].to(driver.device)
                    correct += int((out.argmax(dim=-1) == ys).sum().item())
        per_sample = data.y_test[0].numel() if data.y_test.dim() > 1 else 1
        acc = correct / max(rows * per_sample, 1)
        box = torch.tensor([acc], dtype=torch.float64, device=ctx.device)
        dist.broadcast(box, src=n - 1)
        return float(box.item()) if rank == 0 else None

    return run_loop(
        ctx,
        Trainable(
            name=ctx.strategy_name or "Pipeline",
            step=step,
            state_dict=state_dict,
            load_state_dict=load_state_dict,
            evaluate=evaluate,
            samples_per_step=cfg.batchSize,
        ),
    )


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged = merge_stage_states(parts)
    shadow: dict[str, torch.Tensor] = {}
    for part in parts:
        shadow.update(part["shadow"])
    if shadow:
        merged["shadow"] = shadow
    return merged
