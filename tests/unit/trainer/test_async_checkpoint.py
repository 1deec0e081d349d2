"""Asynchronous sharded checkpoints (fp64, gloo, real ranks): the loop trains on while a
save is written, what was saved is the state of the step it names (resumes onto the
uninterrupted trajectory), a failed background write leaves the previous checkpoint as
`latest` and is reported, and a directory not shared by the ranks is still dropped."""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from unit.trainer.harness import a_spec, launch
from unit.trainer.ranks import run_ranks, strategy_context
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_trainer.checkpoint import LATEST, Checkpointer
from dtjob_trainer.sharded import read_full

WORLD = 2
TOTAL = 12
EVERY = 4
LEAD = 2
"""Steps the training thread must run while a (non-final) save is being written."""

_STEPS = [0]  # optimizer steps this rank has run, counted on the training thread
_WRITES: list[dict[str, Any]] = []  # what each background write saw as it began
_TWINS: list[torch.Tensor] = []  # the host buffers' "page-locked" twins (ordinary here)
_ON_TWINS: list[float] = []  # after each staging: the share of its buffers that are twins


def _spec() -> dict[str, Any]:
    spec = a_spec(
        "FSDP", steps=TOTAL, checkpoint_every=EVERY, optimizer={"type": "Adam", "lr": 0.01}
    )
    spec["checkpoint"]["keep"] = 3
    return spec


def _step_of(path: Any) -> int:
    return int(Path(str(path)).name.split("-")[1].split(".")[0])


def _began(writer: FileSystemWriter) -> int:
    """Record what the directory looked like as this write began; its step."""
    step = _step_of(writer.path)
    latest = Path(str(writer.path)).parent / LATEST
    _WRITES.append(
        {
            "step": step,
            "steps_run": _STEPS[0],
            "latest": latest.read_text() if latest.exists() else None,
        }
    )
    return step


class _SlowWriter(FileSystemWriter):
    """Writes the checkpoints of the steps in `slow` only once training has run LEAD more
    steps: a loop blocked by the save would never get there (the write then fails)."""

    slow: tuple[int, ...] = ()

    def write_data(self, plan: Any, planner: Any) -> Any:
        step = _began(self)
        deadline = time.monotonic() + 60
        while step in self.slow and _STEPS[0] < step + LEAD:
            if time.monotonic() > deadline:
                raise TimeoutError(f"training stood still while step {step} was written")
            time.sleep(0.01)
        _WRITES[-1]["steps_when_written"] = _STEPS[0]
        return super().write_data(plan, planner)


class _FailingWriter(FileSystemWriter):
    """Rank 1's write of the steps in FAIL raises, as a full disk would."""

    fail: tuple[int, ...] = ()

    def write_data(self, plan: Any, planner: Any) -> Any:
        import torch.distributed as dist

        if _began(self) in self.fail and dist.get_rank() == 1:
            raise OSError(28, "No space left on device (injected)")
        return super().write_data(plan, planner)


def _twins_in(async_checkpoint: Any) -> None:
    """The stager's page-locked twins, made the way a GPU run makes them but in ordinary
    memory (page-locking needs CUDA): the FSDP state's DTensors are moved to them too."""

    def twin(t: torch.Tensor) -> torch.Tensor:
        _TWINS.append(torch.empty(t.shape, dtype=t.dtype))
        return _TWINS[-1]

    async_checkpoint.default_allocate = lambda: twin
    real_stage = async_checkpoint.HostStager.stage

    def stage(self: Any, state_dict: dict[str, Any]) -> dict[str, Any]:
        staged = real_stage(self, state_dict)
        buffers = self.buffers()
        _ON_TWINS.append(sum(any(b is t for t in _TWINS) for b in buffers) / len(buffers))
        return staged

    async_checkpoint.HostStager.stage = stage


def _train(
    rank: int,
    world: int,
    spec: dict[str, Any],
    workdir: Path,
    writer: str,
    fail: tuple[int, ...],
    sigterm_after: int | None = None,
) -> dict[str, Any]:
    """Rank body: the real FSDP strategy with the writer named by `writer` swapped in and
    its steps counted; the result, the writes and the checkpoint log records."""
    import dtjob_trainer.async_checkpoint as async_checkpoint
    from dtjob_trainer.errors import TrainerError
    from dtjob_trainer.strategies import fsdp

    _FailingWriter.fail = fail
    # Not the save SIGTERM stops at, nor the last: the loop waits for those.
    _SlowWriter.slow = (4,) if sigterm_after else (4, 8)
    async_checkpoint.FileSystemWriter = {"slow": _SlowWriter, "failing": _FailingWriter}[writer]  # type: ignore[misc]
    _twins_in(async_checkpoint)
    real_loop = fsdp.run_loop

    def counting_loop(ctx: Any, t: Any) -> Any:
        inner = t.step

        def step(s: int) -> torch.Tensor:
            loss = inner(s)
            _STEPS[0] += 1
            if _STEPS[0] == sigterm_after:
                ctx.stop.set()  # what the SIGTERM handler does
            return loss

        t.step = step
        return real_loop(ctx, t)

    fsdp.run_loop = counting_loop  # type: ignore[assignment]
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(f"{r.levelname} {r.getMessage()}")  # type: ignore[method-assign]
    logging.getLogger("dtjob_trainer.async_checkpoint").addHandler(handler)
    ctx = strategy_context(spec, rank, world, workdir)
    try:
        result: Any = fsdp.run(ctx)
        error = None
    except TrainerError as exc:
        result, error = None, f"{type(exc).__name__}: {exc}"
    return {
        "result": result,
        "error": error,
        "writes": _WRITES,
        "log": records,
        "on_twins": _ON_TWINS,
    }


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    workdir = tmp_path_factory.mktemp("slow")
    ranks = run_ranks(_train, WORLD, _spec(), workdir, "slow", (), workdir=workdir)
    return workdir / "ckpt", ranks


def test_training_goes_on_while_a_save_is_written(
    slow_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    ckpt, ranks = slow_run
    for r in ranks:
        assert r["error"] is None
        writes = {w["step"]: w for w in r["writes"]}
        assert sorted(writes) == [4, 8, 12]
        for step in (4, 8):
            # The save of `step` began after that step and its shards were written only
            # after the loop had run LEAD more steps: the loop went on meanwhile. (How soon
            # after the step the background write began is the machine's: on a loaded CI
            # machine the loop was two steps further by then.)
            assert step <= writes[step]["steps_run"]
            assert step + LEAD <= writes[step]["steps_when_written"]
        # At most one save in flight: step 8's began after step 4's was committed.
        assert writes[8]["latest"] == Checkpointer.dir_name(4)
        # Step 4 was staged in ordinary buffers, 8 and 12 in their twins (step 12's shards
        # are compared with the reference below).
        assert r["on_twins"] == [0.0, 1.0, 1.0]
    assert Checkpointer(ckpt).steps() == [4, 8, 12]
    assert (ckpt / LATEST).read_text() == Checkpointer.dir_name(12)
    result = ranks[0]["result"]
    ref = reference_run(_spec())
    assert_losses_close(result.losses, ref.losses, "fp64")  # saving did not disturb training
    final = read_full(ckpt / Checkpointer.dir_name(12))["model"]
    assert_params_close(final, ref.params, "fp64")
    assert json.loads((ckpt / "progress.json").read_text())["lastCheckpointStep"] == 12


def test_a_checkpoint_written_while_training_went_on_resumes_onto_the_trajectory(
    slow_run: tuple[Path, Any], tmp_path: Path
) -> None:
    # Step 4's shards were written when the parameters had moved on to step 6 or later:
    # the host copy taken at step 4 is what must be in them.
    ckpt, _ = slow_run
    job = tmp_path / "job-ckpt"
    job.mkdir()
    shutil.copytree(ckpt / Checkpointer.dir_name(4), job / Checkpointer.dir_name(4))
    (job / LATEST).write_text(Checkpointer.dir_name(4))
    out = launch(_spec(), tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None and out.result["start_step"] == 4
    ref = reference_run(_spec())
    assert_losses_close(out.result["losses"], ref.losses[4:], "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


def test_a_failed_background_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    ranks = run_ranks(_train, WORLD, _spec(), tmp_path, "failing", (8,), workdir=tmp_path)
    ckpt = tmp_path / "ckpt"
    for r in ranks:
        assert r["error"] is None  # one failure is survived, and no rank hung
        assert r["result"].steps == TOTAL
        # While step 12 was being saved, step 8 had failed: step 4 was still `latest`.
        assert {w["step"]: w["latest"] for w in r["writes"]}[12] == Checkpointer.dir_name(4)
    assert any(
        line.startswith("ERROR checkpoint of step 8 could not be written")
        and "rank 1: OSError" in line
        and "No space left on device" in line
        for line in ranks[0]["log"]
    ), ranks[0]["log"]
    assert Checkpointer(ckpt).steps() == [4, 12]
    assert not Checkpointer(ckpt).staging_dir(8).exists()
    assert_losses_close(ranks[0]["result"].losses, reference_run(_spec()).losses, "fp64")


@pytest.mark.parametrize(
    ("fail", "message"),
    [
        ((12,), "the checkpoint of step 12 could not be written"),
        ((4, 8), "2 checkpoints in a row could not be written"),
    ],
)
def test_a_lost_final_checkpoint_or_repeated_failures_end_the_run(
    fail: tuple[int, ...], message: str, tmp_path: Path
) -> None:
    ranks = run_ranks(_train, WORLD, _spec(), tmp_path, "failing", fail, workdir=tmp_path)
    for r in ranks:  # every rank stops alike, with the cause
        assert r["error"] is not None and message in r["error"], r["error"]
        assert "No space left on device" in r["error"]
    ckpt = tmp_path / "ckpt"
    kept = [s for s in (4, 8) if s not in fail]
    assert Checkpointer(ckpt).steps() == kept
    if kept:
        assert (ckpt / LATEST).read_text() == Checkpointer.dir_name(kept[-1])
    else:
        assert not (ckpt / LATEST).exists()


@pytest.mark.parametrize("fail", [(), (8,)])
def test_sigterm_while_a_save_is_in_flight_commits_the_stopping_step(
    fail: tuple[int, ...], tmp_path: Path
) -> None:
    # SIGTERM after step 5, while step 4's save is still being written (the slow writer
    # waits for step 6): the loop stops at its next sync point, step 8, waits for step 4's
    # save and then writes and commits step 8's before it exits, unless that write fails.
    writer = "failing" if fail else "slow"
    ranks = run_ranks(_train, WORLD, _spec(), tmp_path, writer, fail, 5, workdir=tmp_path)
    ckpt = tmp_path / "ckpt"
    for r in ranks:
        assert r["error"] is not None and r["error"].startswith("Preempted: stopped by SIGTERM")
        assert "after step 8" in r["error"]
    if fail:  # still a preemption (exit 143), with the cause; step 4 stays `latest`
        assert "the checkpoint of step 8 could not be written" in ranks[0]["error"]
        assert Checkpointer(ckpt).steps() == [4]
    else:
        assert Checkpointer(ckpt).steps() == [4, 8]
        assert (ckpt / LATEST).read_text() == Checkpointer.dir_name(8)
        full = read_full(ckpt / Checkpointer.dir_name(8))["model"]
        assert_params_close(full, reference_run(_spec(), steps=8).params, "fp64")


def _save_to_own_directory(rank: int, world: int, root: str) -> Any:
    """Rank body: each rank saves in the background into a directory of its own, as pods
    with an emptyDir each would; the outcome every rank was told."""
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dtjob_trainer.async_checkpoint import AsyncSaver
    from dtjob_trainer.sharded import ShardedState

    model = nn.Sequential(nn.Linear(4, 6, dtype=torch.float64))
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    state = ShardedState(model, torch.optim.Adam(model.parameters(), lr=0.1))
    saver = AsyncSaver(Checkpointer(Path(root) / f"pod-{rank}"), state, "FSDP", rank, world)
    saver.start(10)
    outcome = saver.wait()
    return outcome and (outcome.kind, outcome.path)


def test_a_directory_not_shared_by_the_ranks_commits_nothing(tmp_path: Path) -> None:
    root = tmp_path / "pods"
    results = run_ranks(_save_to_own_directory, WORLD, str(root), workdir=tmp_path)
    assert results == [("dropped", None), ("dropped", None)]
    for rank in range(WORLD):
        assert list((root / f"pod-{rank}").iterdir()) == []
        assert Checkpointer(root / f"pod-{rank}").load_latest() is None
