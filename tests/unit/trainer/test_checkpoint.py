"""Checkpoint files: round trip, `latest`, pruning, and atomicity under a crash mid-write."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dtjob_trainer import checkpoint
from dtjob_trainer.checkpoint import LATEST, Checkpointer


def _state(value: float) -> dict[str, object]:
    return {"model": {"w": torch.full((3,), value)}, "optimizer": {"state": {}}}


def test_round_trip_and_latest(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, keep=2)
    assert ck.load_latest() is None
    ck.save(10, "FSDP", 2, _state(1.0))
    ck.save(20, "FSDP", 2, _state(2.0))
    loaded = ck.load_latest()
    assert loaded is not None
    assert (loaded.step, loaded.strategy, loaded.world_size) == (20, "FSDP", 2)
    assert torch.equal(loaded.state["model"]["w"], torch.full((3,), 2.0))  # type: ignore[index]
    assert (tmp_path / LATEST).read_text() == "step-000000020.pt"


def test_keeps_only_the_newest(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, keep=2)
    for step in (5, 10, 15, 20):
        ck.save(step, "DataParallel", 1, _state(float(step)))
    assert ck.steps() == [15, 20]


def test_crash_while_writing_keeps_the_previous_latest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = Checkpointer(tmp_path, keep=3)
    ck.save(10, "DataParallel", 1, _state(1.0))

    def dies_half_way(obj: object, fh: object) -> None:
        fh.write(b"half a checkpoint")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", dies_half_way)
    with pytest.raises(OSError, match="disk full"):
        ck.save(20, "DataParallel", 1, _state(2.0))
    monkeypatch.undo()
    assert ck.steps() == [10]
    assert sorted(p.name for p in tmp_path.iterdir()) == [LATEST, "step-000000010.pt"]
    loaded = ck.load_latest()
    assert loaded is not None and loaded.step == 10


def test_a_file_left_by_a_process_killed_mid_write_goes_with_the_next_save(
    tmp_path: Path,
) -> None:
    # A background write is cut off with its process (an error elsewhere, SIGKILL): its
    # temporary file (GBs for a large model) must not stay on the volume for good.
    ck = Checkpointer(tmp_path, keep=2)
    ck.save(10, "DataParallel", 1, _state(1.0))
    stale = tmp_path / ".step-000000020.pt.tmp-4242"
    stale.write_bytes(b"half a checkpoint")
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("kept")
    assert ck.steps() == [10] and ck.load_latest() is not None  # never read as one
    ck.save(30, "DataParallel", 1, _state(3.0))
    assert not stale.exists() and unrelated.exists()
    assert ck.steps() == [10, 30]


def test_unreadable_newest_falls_back_to_an_older_one(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, keep=3)
    ck.save(10, "DataParallel", 1, _state(1.0))
    ck.save(20, "DataParallel", 1, _state(2.0))
    (tmp_path / Checkpointer.file_name(20)).write_bytes(b"garbage")
    loaded = ck.load_latest()
    assert loaded is not None and loaded.step == 10


def test_missing_latest_uses_the_highest_step(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, keep=3)
    ck.save(10, "DataParallel", 1, _state(1.0))
    ck.save(30, "DataParallel", 1, _state(3.0))
    (tmp_path / LATEST).unlink()
    loaded = ck.load_latest()
    assert loaded is not None and loaded.step == 30
