"""Single-process references of the asynchronous pipeline schedules, written from the
papers' update rules (not from the schedule code):

- PipeDream: every micro-batch is an optimizer step of each stage; micro-batch i of a step
  goes through stage s with the weights after the updates of micro-batches up to
  i - (S - s) of that step (staleness S - s - 1, the last stage never stale), and its
  gradient is the gradient of that same composite function (weight stashing).
- PipeDream-2BW: W(t+1) = W(t) - opt(grad f(W(t-1)) on batch t), W(-1) = W(0).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.func import functional_call
from unit.trainer.reference import Reference

from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.models import build_model, loss_fn, split_into_stages
from dtjob_trainer.optim import build_optimizer


def pipedream_reference(spec: dict[str, Any], stages: int) -> Reference:
    """PipeDream with weight stashing over `stages` stages, in one process."""
    cfg = load_config(spec)
    t, m = cfg.trainer, cfg.pipeline.microbatches
    model = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    parts = split_into_stages(model, stages)
    optimizers = [build_optimizer(list(p.parameters()), t.optimizer) for p in parts]
    # history[s][v]: stage s's weights after v of its updates
    history: list[dict[int, dict[str, torch.Tensor]]] = [{0: _weights(p)} for p in parts]
    losses = []
    for step in range(t.steps):
        x, y = batch(data, step, t.batchSize, t.seed)
        step_losses = []
        for i, (xc, yc) in enumerate(zip(x.chunk(m), y.chunk(m), strict=True)):
            versions = [step * m + max(0, i - (stages - s) + 1) for s in range(stages)]
            used = [
                {k: v.clone().requires_grad_() for k, v in history[s][versions[s]].items()}
                for s in range(stages)
            ]
            h = xc
            for part, w in zip(parts, used, strict=True):
                h = functional_call(part, w, (h,))
            loss = loss_fn(h, yc)
            step_losses.append(loss.item())
            leaves = [w for ws in used for w in ws.values()]
            grads = iter(torch.autograd.grad(loss, leaves))
            for s, (part, w) in enumerate(zip(parts, used, strict=True)):
                for p in part.parameters():
                    p.grad = None
                named = dict(part.named_parameters())
                for name in w:
                    named[name].grad = next(grads)
                optimizers[s].step()
                history[s][step * m + i + 1] = _weights(part)
        losses.append(sum(step_losses) / m)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return Reference(losses, params)


def two_bw_reference(spec: dict[str, Any]) -> Reference:
    """PipeDream-2BW's delayed update in one process, on the full batch of every step."""
    cfg = load_config(spec)
    t = cfg.trainer
    model = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    optimizer = build_optimizer(model.parameters(), t.optimizer)
    previous = _weights(model)  # W(-1) = W(0)
    losses = []
    for step in range(t.steps):
        x, y = batch(data, step, t.batchSize, t.seed)
        stale = {k: v.clone().requires_grad_() for k, v in previous.items()}
        loss = loss_fn(functional_call(model, stale, (x,)), y)
        grads = torch.autograd.grad(loss, list(stale.values()))
        previous = _weights(model)  # W(t) becomes the next step's W(t-1)
        for p, g in zip(model.parameters(), grads, strict=True):
            p.grad = g
        optimizer.step()
        losses.append(loss.item())
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return Reference(losses, params)


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}
