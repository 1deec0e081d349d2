"""Full checkpoints written in the background (`async_full.FullSaver`): `start` returns
before the write, the file holds the state of its step whatever training changed after,
one save at a time, a failure keeps the previous checkpoint and two in a row end the run,
a copy that does not fit in memory is written in the foreground, and the final save waits.
The training loop's use of it (DataParallel, slow writes, resume) is in
test_async_full_loop.py."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from dtjob_trainer.async_full import FullSaver, host_copy, live_storages, state_bytes
from dtjob_trainer.checkpoint import LATEST, Checkpointer
from dtjob_trainer.errors import TrainerError


class GatedCheckpointer(Checkpointer):
    """Writes a step only once the test opens its gate; steps in `fail` raise as a full
    disk would."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, keep=3)
        self.gate = threading.Event()
        self.fail: set[int] = set()
        self.writing: list[int] = []

    def save(self, step: int, strategy: str, world_size: int, state: dict[str, Any]) -> Path:
        self.writing.append(step)
        assert self.gate.wait(30), "the test never opened the gate"
        if step in self.fail:
            raise OSError(28, "No space left on device (injected)")
        return super().save(step, strategy, world_size, state)


def live_state() -> tuple[torch.nn.Linear, dict[str, Any]]:
    """A model and a state that shares its tensors, as a gathered CPU state does."""
    model = torch.nn.Linear(3, 2)
    adam = {"step": torch.tensor(4.0), "exp_avg": torch.zeros(2, 3)}
    return model, {"model": model.state_dict(), "optimizer": {"state": {0: adam}, "lr": 0.1}}


def saved(ckpt: Checkpointer, step: int) -> dict[str, Any]:
    path = ckpt.directory / Checkpointer.file_name(step)
    return torch.load(path, weights_only=True)["state"]  # type: ignore[no-any-return]


def test_host_copy_shares_nothing_a_step_changes() -> None:
    model, state = live_state()
    copy = host_copy(state)
    with torch.no_grad():
        model.weight.add_(1.0)
    state["optimizer"]["state"][0]["step"] += 1
    assert not torch.equal(copy["model"]["weight"], model.weight)
    assert copy["optimizer"]["state"][0]["step"].item() == 4.0
    assert copy["optimizer"]["lr"] == 0.1
    assert state_bytes(state) == (6 + 2 + 1 + 6) * 4


def test_with_the_live_storages_known_only_what_shares_them_is_copied() -> None:
    # As on a GPU: the gathering offloaded the parameters (fresh host tensors), while
    # Adam's step count is the optimizer's own host tensor.
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    live = live_storages(model, optimizer)
    offloaded = {k: v.detach().clone() for k, v in model.state_dict().items()}
    step = optimizer.state[model.weight]["step"]
    state = {"model": offloaded, "optimizer": {"state": {0: {"step": step}}}}
    copy = host_copy(state, live)
    assert copy["model"]["weight"] is offloaded["weight"]  # a copy already: kept
    assert copy["optimizer"]["state"][0]["step"] is not step  # the live one: copied
    assert torch.equal(copy["optimizer"]["state"][0]["step"], step)
    assert state_bytes(state, live) == step.element_size()
    with torch.no_grad():
        step += 1  # what the next optimizer step does to it
    assert copy["optimizer"]["state"][0]["step"].item() == 1.0


def test_training_goes_on_while_the_checkpoint_is_written_and_it_holds_its_step(
    tmp_path: Path,
) -> None:
    ckpt = GatedCheckpointer(tmp_path)
    reported: list[int] = []
    saver = FullSaver(ckpt, "DataParallel", 2, on_commit=reported.append)
    model, state = live_state()
    before = model.weight.detach().clone()
    kept = saver.start(10, state)  # returns while the write waits at the gate
    assert reported == [] and not (tmp_path / LATEST).exists()
    with torch.no_grad():
        model.weight.mul_(3.0)  # the next steps change the live parameters
    state["optimizer"]["state"][0]["step"] += 5
    assert torch.equal(kept["model"]["weight"], before)  # what the loop keeps is the copy
    ckpt.gate.set()
    outcome = saver.wait()
    assert outcome is not None and outcome.kind == "committed"
    on_disk = saved(ckpt, 10)
    assert torch.equal(on_disk["model"]["weight"], before)
    assert on_disk["optimizer"]["state"][0]["step"].item() == 4.0
    assert (tmp_path / LATEST).read_text() == Checkpointer.file_name(10)
    assert reported == [10]  # reported once committed, by the writing thread


def test_the_next_save_waits_for_the_one_in_flight(tmp_path: Path) -> None:
    ckpt = GatedCheckpointer(tmp_path)
    saver = FullSaver(ckpt, "DataParallel", 1)
    _, state = live_state()
    saver.start(10, state)
    second = threading.Thread(target=saver.start, args=(20, state))
    second.start()
    second.join(0.3)
    assert second.is_alive() and ckpt.writing == [10]  # step 20 waits for step 10
    ckpt.gate.set()
    second.join(10)
    assert not second.is_alive()
    saver.wait()
    assert ckpt.writing == [10, 20] and ckpt.steps() == [10, 20]


def test_a_failed_write_keeps_the_previous_checkpoint_and_two_end_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = GatedCheckpointer(tmp_path)
    ckpt.gate.set()
    ckpt.fail = {20, 30}
    saver = FullSaver(ckpt, "DataParallel", 1)
    _, state = live_state()
    saver.start(10, state)
    with caplog.at_level(logging.ERROR, logger="dtjob_trainer.async_full"):
        saver.start(20, state)
        outcome = saver.wait()
    assert outcome is not None and outcome.kind == "failed"
    assert "OSError: [Errno 28] No space left on device (injected)" in outcome.error
    assert "checkpoint of step 20 could not be written" in caplog.text
    assert (tmp_path / LATEST).read_text() == Checkpointer.file_name(10)
    saver.start(30, state)
    with pytest.raises(TrainerError, match=r"2 checkpoints in a row .* \(step 30\)"):
        saver.wait()


def test_one_failure_then_a_success_starts_the_count_again(tmp_path: Path) -> None:
    ckpt = GatedCheckpointer(tmp_path)
    ckpt.gate.set()
    ckpt.fail = {20, 40}
    saver = FullSaver(ckpt, "DataParallel", 1)
    _, state = live_state()
    for step in (10, 20, 30, 40):
        saver.start(step, state)
    outcome = saver.wait()  # 40 failed, but 30 did not
    assert outcome is not None and outcome.kind == "failed"
    assert (tmp_path / LATEST).read_text() == Checkpointer.file_name(30)


def test_a_copy_that_does_not_fit_is_written_in_the_foreground(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = Checkpointer(tmp_path)
    saver = FullSaver(ckpt, "DataParallel", 1, free=lambda: 10)
    _, state = live_state()
    with caplog.at_level(logging.WARNING, logger="dtjob_trainer.async_full"):
        kept = saver.start(10, state)
        saver.start(20, state)
    assert kept is state  # nothing copied
    assert ckpt.steps() == [10, 20]  # both written before start returned
    assert caplog.text.count("written in the foreground") == 1  # said once


def test_the_final_save_waits_and_a_failed_one_ends_the_run(tmp_path: Path) -> None:
    ckpt = GatedCheckpointer(tmp_path)
    ckpt.gate.set()
    reported: list[int] = []
    saver = FullSaver(ckpt, "DataParallel", 1, on_commit=reported.append)
    _, state = live_state()
    saver.start(10, state)
    path = saver.finish(12, state)
    assert path == tmp_path / Checkpointer.file_name(12) and path.exists()
    assert reported == [10]  # the caller reports the final one itself
    ckpt.fail = {14}
    with pytest.raises(TrainerError, match="checkpoint of step 14 could not be written"):
        saver.finish(14, state)
    assert (tmp_path / LATEST).read_text() == Checkpointer.file_name(12)


def test_free_memory_is_the_containers_limit_less_its_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dtjob_trainer import async_full

    def files(limit: str, used: str, name: str) -> tuple[str, str]:
        (tmp_path / f"{name}.limit").write_text(limit)
        (tmp_path / f"{name}.used").write_text(used)
        return str(tmp_path / f"{name}.limit"), str(tmp_path / f"{name}.used")

    v2, v1 = files("max\n", "100\n", "v2"), files("1000\n", "300\n", "v1")
    monkeypatch.setattr(async_full, "_CGROUP_FILES", (v2, v1))
    assert async_full.free_memory() == 700  # v2 has no limit: v1's
    monkeypatch.setattr(async_full, "_CGROUP_FILES", (files("4096\n", "1024\n", "v2b"),))
    assert async_full.free_memory() == 3072
    unlimited = files(str(1 << 63), "5\n", "v1u")
    monkeypatch.setattr(async_full, "_CGROUP_FILES", (unlimited,))
    free = async_full.free_memory()  # no limit anywhere: the machine's MemAvailable
    assert free is None or free > 5
