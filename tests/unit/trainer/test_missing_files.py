"""`sharded.missing_files`: the commit check of a sharded checkpoint, under both forms of
DCP's save result (torch 2.13 returns where each piece went; 2.11 leaves that to the
`.metadata` file it wrote)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save

from dtjob_trainer.sharded import missing_files


def written(tmp_path: Path):  # type: ignore[no-untyped-def]
    state = {"w": torch.ones(4, 4), "b": torch.zeros(4)}
    return save(state, storage_writer=FileSystemWriter(tmp_path), no_dist=True)


def test_a_whole_checkpoint_misses_nothing(tmp_path: Path) -> None:
    assert missing_files(written(tmp_path), tmp_path) == []


def test_without_storage_data_the_written_metadata_is_read(tmp_path: Path) -> None:
    bare = dataclasses.replace(written(tmp_path), storage_data=None)
    assert missing_files(bare, tmp_path) == []
    shards = sorted(p.name for p in tmp_path.glob("*.distcp"))
    assert shards
    (tmp_path / shards[0]).unlink()
    assert missing_files(bare, tmp_path) == [shards[0]]


def test_without_storage_data_or_the_metadata_file_nothing_commits(tmp_path: Path) -> None:
    bare = dataclasses.replace(written(tmp_path), storage_data=None)
    (tmp_path / ".metadata").unlink()
    assert missing_files(bare, tmp_path) == [".metadata (FileNotFoundError)"]
