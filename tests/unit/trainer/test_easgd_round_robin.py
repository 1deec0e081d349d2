"""Acceptance of ParameterServer mode EASGDRoundRobin (Algorithm 1 of the multi-GPU EASGD
lecture notes) on CPU over gloo: G workers and one master holding the centre.

- The schedule: the master applies the workers' exchanges strictly in turn (worker
  t mod G at turn t) even when the workers arrive in the opposite order.
- Conservation: with zero gradients sum_j W_j + W_bar stays what it was (fp64, 1e-12)
  while the workers, started apart, are pulled towards the centre.
- rho = 0: each worker is plain SGD on its own shard of the batches; the centre never moves.
- Equivalence: the real strategy's centre, every worker's parameters and the per-step
  losses equal a single-process implementation of Algorithm 1 (fp64, 1e-10), for tau 1
  and 2 (local steps between turns).
- Resume: stopped by SIGTERM and restarted, it ends where Algorithm 1 ends (1e-10).
- Training: the centre reaches >= 0.90 held-out accuracy on digits.
"""

from __future__ import annotations

import copy
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from unit.trainer.harness import LAUNCH_SECONDS, a_spec, finish, launch, start_launch, wait_for
from unit.trainer.ranks import run_ranks, strategy_context

from dtjob_trainer.checkpoint import LATEST, Checkpointer
from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.errors import EXIT_PREEMPTED
from dtjob_trainer.models import build_model, loss_fn
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.strategies import easgd, easgd_round_robin

WORKERS = 3
LR = 0.1


def rr_spec(rho: float, tau: int = 1, **trainer: Any) -> dict[str, Any]:
    """Round-robin EASGD over 3 workers and 1 master, fp64 MLP, plain SGD lr 0.1, batch 30."""
    trainer.setdefault("optimizer", {"type": "SGD", "lr": LR})
    trainer.setdefault("batchSize", 30)
    extra = {"parameterServer": {"mode": "EASGDRoundRobin", "rho": rho, "tau": tau}}
    return a_spec("ParameterServer", workers=WORKERS, ps=1, strategy_extra=extra, **trainer)


@dataclass
class Algorithm1:
    """The result of the single-process reference."""

    centre: torch.Tensor
    workers: list[torch.Tensor]
    losses: list[float]
    """Per round s: the mean of the workers' losses (what the loop reports)."""


def algorithm_1(spec: dict[str, Any], steps: int) -> Algorithm1:
    """Algorithm 1 in one process: for t = 0, 1, ..., worker j = t mod G takes its turn on
    shard j of global batch s = t // G; on rounds s % tau == 0 it and the centre move by
    alpha (W_j - W_bar) from the values before its gradient step."""
    cfg = load_config(spec)
    ps, t = cfg.parameter_server, cfg.trainer
    alpha = t.optimizer.lr * ps.rho
    model = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    models = [copy.deepcopy(model) for _ in range(WORKERS)]
    optimizers = [build_optimizer(m.parameters(), t.optimizer) for m in models]
    centre = parameters_to_vector(model.parameters()).detach().clone()
    round_loss = 0.0
    losses = []
    for turn in range(steps * WORKERS):
        j, s = turn % WORKERS, turn // WORKERS
        w = parameters_to_vector(models[j].parameters()).detach().clone()
        x, y = batch(data, s, t.batchSize, t.seed, j, WORKERS)
        optimizers[j].zero_grad()
        loss = loss_fn(models[j](x), y)
        loss.backward()
        optimizers[j].step()
        round_loss += loss.item() / WORKERS
        if s % ps.tau == 0:
            diff = w - centre
            after = parameters_to_vector(models[j].parameters()).detach() - alpha * diff
            vector_to_parameters(after, models[j].parameters())
            centre = centre + alpha * diff
        if j == WORKERS - 1:
            losses.append(round_loss)
            round_loss = 0.0
    flat = [parameters_to_vector(m.parameters()).detach() for m in models]
    return Algorithm1(centre, flat, losses)


def turns_body(rank: int, world: int, rho: float, rounds: int) -> dict[str, Any]:
    """Rank body: the real master (RoundRobinCentre) and workers (easgd_step with
    master_exchange), zero gradients. Worker j starts at centre + 0.1 (j + 1) and arrives
    late in reverse order (worker 0 last), so first come first served would differ."""
    cfg = load_config(rr_spec(rho))
    model = build_model(cfg, torch.float64)
    centre0 = parameters_to_vector(model.parameters()).detach().clone()
    alpha = LR * rho
    if rank == WORKERS:
        centre = easgd_round_robin.RoundRobinCentre(centre0, alpha, WORKERS)
        for _ in range(rounds):
            centre.serve_round()
        return {"order": centre.order, "turns": centre.turns, "centre": centre.values}
    with torch.no_grad():
        vector_to_parameters(centre0 + 0.1 * (rank + 1), model.parameters())
    start = parameters_to_vector(model.parameters()).detach().clone()
    exchange = easgd_round_robin.master_exchange(WORKERS, None)
    params = list(model.parameters())

    def no_gradient(step: int) -> torch.Tensor:
        time.sleep(0.05 * (WORKERS - 1 - rank))
        return torch.zeros((), dtype=torch.float64)

    for step in range(rounds):
        time.sleep(0.05 * (WORKERS - 1 - rank))
        easgd.easgd_step(step, params, 1, alpha, exchange, no_gradient)
    return {"centre0": centre0, "start": start, "end": parameters_to_vector(params).detach()}


def test_master_applies_turns_round_robin_and_conserves_mass(tmp_path: Path) -> None:
    rounds = 3
    ranks = run_ranks(turns_body, WORKERS + 1, 2.0, rounds, workdir=tmp_path)
    master, workers = ranks[WORKERS], ranks[:WORKERS]
    assert master["order"] == [t % WORKERS for t in range(rounds * WORKERS)]
    assert master["turns"] == rounds * WORKERS
    before = sum(w["start"] for w in workers) + workers[0]["centre0"]
    after = sum(w["end"] for w in workers) + master["centre"]
    torch.testing.assert_close(after, before, rtol=0, atol=1e-12)
    # Not conserved by standing still: every worker moved towards the centre, which moved.
    for w in workers:
        assert (w["end"] - master["centre"]).norm() < (w["start"] - w["centre0"]).norm()
    assert (master["centre"] - workers[0]["centre0"]).abs().min() > 0.01


def strategy_body(rank: int, world: int, spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Rank body: the real strategy, and rank 0's final checkpoint."""
    ctx = strategy_context(spec, rank, world, workdir)
    result = easgd_round_robin.run(ctx)
    ckpt = ctx.checkpoints.load_latest() if rank == 0 else None
    return {"result": result, "state": ckpt.state if ckpt else None}


def _flat(spec: dict[str, Any], state: dict[str, torch.Tensor]) -> torch.Tensor:
    model = build_model(load_config(spec), torch.float64)
    model.load_state_dict(state)
    return parameters_to_vector(model.parameters()).detach()


def test_rho_zero_is_independent_sgd_per_worker(tmp_path: Path) -> None:
    steps = 5
    spec = rr_spec(0.0, steps=steps)
    ranks = run_ranks(strategy_body, WORKERS + 1, spec, tmp_path, workdir=tmp_path)
    state = ranks[0]["state"]
    cfg = load_config(spec)
    init = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    for j in range(WORKERS):
        alone = copy.deepcopy(init)
        optimizer = torch.optim.SGD(alone.parameters(), lr=LR)
        for s in range(steps):
            x, y = batch(data, s, 30, cfg.trainer.seed, j, WORKERS)
            optimizer.zero_grad()
            loss_fn(alone(x), y).backward()
            optimizer.step()
        got = _flat(spec, state["workers"][j]["model"])
        torch.testing.assert_close(
            got, parameters_to_vector(alone.parameters()), rtol=0, atol=1e-12
        )
    assert not torch.equal(
        _flat(spec, state["workers"][0]["model"]), _flat(spec, state["workers"][1]["model"])
    )
    for name, value in init.state_dict().items():  # the centre did not move
        assert torch.equal(state["model"][name], value)
    assert state["turns"] == steps * WORKERS


@pytest.mark.parametrize("tau", [1, 2])
def test_strategy_equals_algorithm_1(tau: int, tmp_path: Path) -> None:
    steps = 6
    spec = rr_spec(0.5, tau, steps=steps, logEverySteps=3)
    ranks = run_ranks(strategy_body, WORKERS + 1, spec, tmp_path, workdir=tmp_path)
    state, result = ranks[0]["state"], ranks[0]["result"]
    want = algorithm_1(spec, steps)
    torch.testing.assert_close(_flat(spec, state["model"]), want.centre, rtol=0, atol=1e-10)
    for j in range(WORKERS):
        got = _flat(spec, state["workers"][j]["model"])
        torch.testing.assert_close(got, want.workers[j], rtol=0, atol=1e-10)
    torch.testing.assert_close(
        torch.tensor(result.losses), torch.tensor(want.losses), rtol=0, atol=1e-10
    )
    assert result.strategy == "ParameterServer/EASGDRoundRobin"
    assert state["turns"] == WORKERS * len(range(0, steps, tau))
    # The evaluated model is the centre.
    for name, value in state["model"].items():
        assert torch.equal(result.params[name], value)


def test_sigterm_then_resume_equals_algorithm_1(tmp_path: Path) -> None:
    steps = 200
    spec = rr_spec(0.5, steps=steps, checkpoint_every=10, logEverySteps=5)
    proc, ckpt, result = start_launch(spec, tmp_path)
    wait_for(
        lambda: (ckpt / LATEST).exists() or proc.poll() is not None, LAUNCH_SECONDS, "a checkpoint"
    )
    proc.send_signal(signal.SIGTERM)
    stopped = finish(proc, ckpt, result)
    assert stopped.rc == EXIT_PREEMPTED, stopped.output
    stopped_at = Checkpointer(ckpt).steps()[-1]
    assert 0 < stopped_at < steps

    resumed = launch(spec, tmp_path)
    assert resumed.rc == 0, resumed.output
    assert resumed.result is not None
    assert resumed.result["start_step"] == stopped_at and resumed.result["steps"] == steps
    want = algorithm_1(spec, steps)
    torch.testing.assert_close(
        torch.tensor(resumed.result["losses"]),
        torch.tensor(want.losses[stopped_at:]),
        rtol=0,
        atol=1e-10,
    )
    torch.testing.assert_close(
        _flat(spec, resumed.result["params"]), want.centre, rtol=0, atol=1e-10
    )
    final = Checkpointer(ckpt).load_latest()
    assert final is not None and final.step == steps
    for j in range(WORKERS):
        got = _flat(spec, final.state["workers"][j]["model"])
        torch.testing.assert_close(got, want.workers[j], rtol=0, atol=1e-10)
    assert final.state["turns"] == steps * WORKERS


def test_centre_reaches_accuracy(tmp_path: Path) -> None:
    spec = rr_spec(
        1.0,
        steps=300,
        logEverySteps=100,
        precision="fp32",
        optimizer={"type": "SGD", "lr": 0.05, "momentum": 0.9},
    )
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    assert out.result["strategy"] == "ParameterServer/EASGDRoundRobin"
    assert out.result["accuracy"] >= 0.90
