"""Full checkpoints in the background through the training loop (fp64, gloo, real ranks):
DataParallel trains on while rank 0 writes a checkpoint, the checkpoint holds the state of
the step it names (a resume from it follows the uninterrupted trajectory), and the final
one is whole before the run ends."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import a_spec
from unit.trainer.ranks import run_ranks, strategy_context
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run
from unit.trainer.resume_check import resume_equals_reference

from dtjob_trainer.checkpoint import LATEST, Checkpointer

WORLD = 2
TOTAL = 12
EVERY = 4
LEAD = 2
"""Steps the training thread must run while a (non-final) checkpoint is written."""

_STEPS = [0]  # optimizer steps this rank has run, counted on the training thread
_WRITES: list[dict[str, Any]] = []  # rank 0: each write, as it began and as it went ahead


def _spec() -> dict[str, Any]:
    return a_spec(
        "DataParallel", steps=TOTAL, checkpoint_every=EVERY, optimizer={"type": "Adam", "lr": 0.01}
    )


def _train(rank: int, world: int, spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Rank body: the real DataParallel strategy, its steps counted; rank 0's checkpoint
    writes of steps 4 and 8 wait until training has run LEAD more steps (a loop blocked by
    the write would never get there: the write then fails)."""
    from dtjob_trainer import checkpoint
    from dtjob_trainer.strategies import data_parallel

    real_save = checkpoint.Checkpointer.save

    def slow_save(self: Any, step: int, *args: Any) -> Path:
        _WRITES.append({"step": step, "steps_run": _STEPS[0]})
        deadline = time.monotonic() + 60
        while step < TOTAL and _STEPS[0] < step + LEAD:
            if time.monotonic() > deadline:
                raise TimeoutError(f"training stood still while step {step} was written")
            time.sleep(0.01)
        _WRITES[-1]["steps_when_written"] = _STEPS[0]
        return real_save(self, step, *args)

    checkpoint.Checkpointer.save = slow_save  # type: ignore[method-assign]
    real_loop = data_parallel.run_loop

    def counting_loop(ctx: Any, t: Any) -> Any:
        inner = t.step

        def step(s: int) -> torch.Tensor:
            loss = inner(s)
            _STEPS[0] += 1
            return loss

        t.step = step
        return real_loop(ctx, t)

    data_parallel.run_loop = counting_loop  # type: ignore[assignment]
    ctx = strategy_context(spec, rank, world, workdir)
    result = data_parallel.run(ctx)
    return {"result": result, "writes": _WRITES}


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    workdir = tmp_path_factory.mktemp("slow-full")
    ranks = run_ranks(_train, WORLD, _spec(), workdir, workdir=workdir)
    return workdir / "ckpt", ranks


def test_training_goes_on_while_rank_0_writes_a_full_checkpoint(
    slow_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    ckpt, ranks = slow_run
    writes = {w["step"]: w for w in ranks[0]["writes"]}
    assert sorted(writes) == [4, 8, 12]
    assert ranks[1]["writes"] == []  # rank 0 writes full checkpoints alone
    for step in (4, 8):
        assert step <= writes[step]["steps_run"]
        assert step + LEAD <= writes[step]["steps_when_written"]
    assert Checkpointer(ckpt).steps() == [8, 12]  # keep 2
    assert (ckpt / LATEST).read_text() == Checkpointer.file_name(12)
    result = ranks[0]["result"]
    ref = reference_run(_spec())
    assert_losses_close(result.losses, ref.losses, "fp64")  # saving did not disturb training
    final = torch.load(ckpt / Checkpointer.file_name(12), weights_only=True)["state"]["model"]
    assert_params_close(final, ref.params, "fp64")
    assert json.loads((ckpt / "progress.json").read_text())["lastCheckpointStep"] == 12


def test_a_full_checkpoint_written_while_training_went_on_resumes_onto_the_trajectory(
    slow_run: tuple[Path, Any], tmp_path: Path
) -> None:
    # Step 8's file was written when the parameters had moved on to step 10 or later: the
    # host copy taken at step 8 is what must be in it (Adam's step count included).
    ckpt, _ = slow_run
    job = tmp_path / "job-ckpt"
    job.mkdir()
    shutil.copy(ckpt / Checkpointer.file_name(8), job / Checkpointer.file_name(8))
    (job / LATEST).write_text(Checkpointer.file_name(8))
    resume_equals_reference(_spec(), tmp_path, stopped_at=8)
