"""Acceptance of ParameterServer mode Async (Downpour) and of the parameter-server protocol
it shares with Hogwild and EASGD, on CPU over gloo.

- The update rules of a PS shard, without processes.
- No pushed update is lost: 3 workers push exact (integer) deltas, with no barrier, to 2
  PS ranks holding uneven shards; the final parameters are the sum of every push and each
  PS rank counts exactly the pushes made.
- The real strategy (2 workers, 2 PS ranks) reaches >= 0.90 held-out accuracy on digits
  within 300 updates per worker (600 in all), every pushed update applied.
- A restarted job resumes each worker at the step its PS ranks checkpointed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from unit.trainer.harness import a_spec, launch
from unit.trainer.ps_results import applied_and_pushed
from unit.trainer.ranks import run_ranks

from dtjob_trainer.strategies._ps import (
    Kind,
    PSClient,
    ShardServer,
    ShardState,
    serve,
    shard_bounds,
)

N_WORKERS, N_PS, NUMEL = 3, 2, 11
PUSHES = [5, 9, 2]  # deliberately unequal: fast and slow workers interleave


def async_spec(checkpoint_every: int = 1000, **trainer: Any) -> dict[str, Any]:
    """2 worker and 2 PS pods, mode Async, fp32 Adam on the servers."""
    trainer.setdefault("precision", "fp32")
    trainer.setdefault("optimizer", {"type": "Adam", "lr": 0.01})
    return a_spec(
        "ParameterServer",
        workers=2,
        ps=2,
        checkpoint_every=checkpoint_every,
        strategy_extra={"parameterServer": {"mode": "Async"}},
        **trainer,
    )


def test_shard_bounds_cover_the_vector_in_balanced_pieces() -> None:
    assert shard_bounds(11, 3) == [(0, 4), (4, 8), (8, 11)]
    assert shard_bounds(2, 2) == [(0, 1), (1, 2)]
    with pytest.raises(ValueError):
        shard_bounds(5, 0)


def test_shard_update_rules() -> None:
    values = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
    state = ShardState(values)
    server = ShardServer(state, torch.optim.SGD([values], lr=0.5), elastic_alpha=0.25)

    assert torch.equal(server.handle(Kind.PULL, 0, 0, torch.zeros(2)), torch.tensor([1.0, 2.0]))
    assert state.applied == 0  # a pull changes nothing

    reply = server.handle(Kind.GRADIENT, 1, 7, torch.tensor([2.0, -2.0], dtype=torch.float64))
    assert torch.equal(reply, torch.tensor([0.0, 3.0], dtype=torch.float64))  # 1 - 0.5*2, 2 + 1

    server.handle(Kind.DELTA, 0, 3, torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert torch.equal(values.detach(), torch.tensor([1.0, 4.0], dtype=torch.float64))

    # ELASTIC: the reply is the centre from before; the centre moves alpha of the way.
    before = server.handle(Kind.ELASTIC, 2, 4, torch.tensor([5.0, 0.0], dtype=torch.float64))
    assert torch.equal(before, torch.tensor([1.0, 4.0], dtype=torch.float64))
    assert torch.equal(values.detach(), torch.tensor([2.0, 3.0], dtype=torch.float64))

    assert state.applied == 3
    assert state.worker_steps == {0: 3, 1: 7, 2: 4}


def push_deltas(rank: int, world: int) -> dict[str, Any]:
    """Rank body: workers push (rank + 1) * ones PUSHES[rank] times; PS ranks serve."""
    if rank >= N_WORKERS:
        start, end = shard_bounds(NUMEL, N_PS)[rank - N_WORKERS]
        state = ShardState(torch.nn.Parameter(torch.zeros(end - start, dtype=torch.float64)))
        serve(ShardServer(state), range(N_WORKERS), final_to=0)
        dist.barrier()  # leave only when rank 0 has its final message
        return {"applied": state.applied, "worker_steps": state.worker_steps}
    client = PSClient(range(N_WORKERS, world), NUMEL, torch.float64)
    _, resume = client.pull()
    assert resume == 0  # a fresh start: the servers know no step of this worker
    replies = []
    for step in range(1, PUSHES[rank] + 1):
        reply = client.exchange(Kind.DELTA, step, torch.full((NUMEL,), float(rank + 1)))
        replies.append(reply[0].item())
    client.stop(PUSHES[rank])
    out: dict[str, Any] = {"requests": client.requests, "replies": replies}
    if rank == 0:
        out["final"], out["applied"] = client.final()
    dist.barrier()
    return out


def test_no_pushed_update_is_lost(tmp_path: Path) -> None:
    ranks = run_ranks(push_deltas, N_WORKERS + N_PS, workdir=tmp_path)
    workers, servers = ranks[:N_WORKERS], ranks[N_WORKERS:]

    total = sum(PUSHES[w] * (w + 1) for w in range(N_WORKERS))
    assert torch.equal(workers[0]["final"], torch.full((NUMEL,), float(total), dtype=torch.float64))
    assert [w["requests"] for w in workers] == PUSHES
    assert [s["applied"] for s in servers] == [sum(PUSHES)] * N_PS
    assert workers[0]["applied"] == sum(PUSHES) * N_PS
    for s in servers:
        assert s["worker_steps"] == dict(enumerate(PUSHES))
    for w in range(N_WORKERS):
        # Each reply includes this worker's own push: the parameters only ever grow.
        replies = workers[w]["replies"]
        assert replies == sorted(replies) and replies[0] >= w + 1


def test_async_reaches_accuracy_and_applies_every_push(tmp_path: Path) -> None:
    steps = 300
    out = launch(async_spec(steps=steps, logEverySteps=100), tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    assert out.result["strategy"] == "ParameterServer/Async"
    assert out.result["steps"] == steps
    assert out.result["accuracy"] >= 0.90
    applied, pushed = applied_and_pushed(out.result["message"])
    assert applied == pushed == 2 * steps * 2  # 2 workers x steps, each to 2 PS ranks
    assert len(out.result["losses"]) == steps  # rank 0's loss of every one of its updates
    assert sorted(out.result["params"]) == sorted(
        [
            "0.0.weight",
            "0.0.bias",
            "1.0.weight",
            "1.0.bias",
            "2.0.weight",
            "2.0.bias",
            "3.weight",
            "3.bias",
        ]
    )


def test_restart_resumes_from_the_ps_checkpoints(tmp_path: Path) -> None:
    first = launch(async_spec(steps=10, checkpoint_every=5), tmp_path, name="job")
    assert first.rc == 0, first.output
    shards = sorted(p.name for p in first.checkpoint_dir.iterdir() if p.name.startswith("ps-"))
    assert shards == ["ps-0", "ps-1"]
    # Each PS rank checkpointed its shard at 2 workers x 5 and x 10 steps of updates.
    assert (first.checkpoint_dir / "ps-0" / "step-000000020.pt").exists()

    again = launch(async_spec(steps=16, checkpoint_every=5), tmp_path, name="job")
    assert again.rc == 0, again.output
    assert again.result is not None
    assert again.result["start_step"] == 10 and again.result["steps"] == 16
    applied, pushed = applied_and_pushed(again.result["message"])
    assert applied == pushed == 2 * 6 * 2  # only this run's updates
