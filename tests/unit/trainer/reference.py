"""Single-process reference training for the equivalence tests of every strategy.

`reference_run(spec)` trains the configured model on the GLOBAL batch of every step in one
process, with the trainer's own model, data order and optimizer builders (they are tested
on their own), and returns the loss of each step and the final parameters. A distributed
strategy is correct when its per-step losses and final parameters equal these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dtjob_api.spec import Precision
from dtjob_trainer.config import TrainerConfig, load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.models import build_model, loss_fn
from dtjob_trainer.optim import build_optimizer


@dataclass
class Reference:
    """Per-step losses and final parameters (by name) of a single-process run."""

    losses: list[float]
    params: dict[str, torch.Tensor]


def reference_run(spec: dict[str, Any] | TrainerConfig, steps: int | None = None) -> Reference:
    """Train `steps` (default trainer.steps) steps on one process; see the module docstring."""
    cfg = spec if isinstance(spec, TrainerConfig) else load_config(spec)
    t = cfg.trainer
    dtype = torch.float64 if t.precision == Precision.FP64 else torch.float32
    model = build_model(cfg, dtype)
    data = load_dataset(cfg, dtype)
    optimizer = build_optimizer(model.parameters(), t.optimizer)
    losses = []
    for step in range(t.steps if steps is None else steps):
        x, y = batch(data, step, t.batchSize, t.seed)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    return Reference(losses, params)


def assert_params_close(
    got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], precision: str
) -> None:
    """Same names; values within 1e-10 (fp64) or rtol 1e-5 (fp32)."""
    assert sorted(got) == sorted(want), "parameter names differ"
    for name, value in want.items():
        other = got[name].to(value.dtype)
        if precision == "fp64":
            torch.testing.assert_close(other, value, rtol=0, atol=1e-10, msg=name)
        else:
            torch.testing.assert_close(other, value, rtol=1e-5, atol=1e-6, msg=name)


def assert_losses_close(got: list[float], want: list[float], precision: str) -> None:
    """Same number of steps; values within 1e-10 (fp64) or rtol 1e-5 (fp32)."""
    assert len(got) == len(want)
    tol = {"rtol": 0.0, "atol": 1e-10} if precision == "fp64" else {"rtol": 1e-5, "atol": 0.0}
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), **tol)


def assert_run_equals_reference(result: dict[str, Any] | None, spec: dict[str, Any]) -> None:
    """A launched run's result (`Outcome.result`) has the fp64 reference's losses and final
    parameters."""
    assert result is not None
    ref = reference_run(spec)
    assert_losses_close(result["losses"], ref.losses, "fp64")
    assert_params_close(result["params"], ref.params, "fp64")
