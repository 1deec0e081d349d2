"""Sharded checkpoints (torch.distributed.checkpoint): every rank writes its shards, rank 0
commits the directory only when all are there, an incomplete or tampered one is skipped
for the previous complete one, and the metadata is read without running pickled code."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.ranks import run_ranks

from dtjob_trainer.checkpoint import LATEST, MARKER, Checkpointer
from dtjob_trainer.dcp_io import read_metadata
from dtjob_trainer.sharded import read_full

WORLD = 2


def _save_two_checkpoints(rank: int, world: int, directory: str) -> dict[str, Any]:
    """Rank body: an FSDP-sharded Linear and Adam state, checkpointed at steps 10 and 20
    (parameters differ: 1.0 then 2.0). Returns what rank 0 resumed from afterwards."""
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dtjob_trainer.sharded import ShardedState, load_sharded, save_sharded

    mesh = init_device_mesh("cpu", (world,))
    model = nn.Sequential(nn.Linear(4, 6, dtype=torch.float64))
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    state = ShardedState(model, optimizer)
    ck = Checkpointer(directory, keep=3)
    for step, value in ((10, 1.0), (20, 2.0)):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)
        save_sharded(ck, state, step, "FSDP", rank, world)
    dist.barrier()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    # What every rank resumes from: the newest checkpoint rank 0 finds whole.
    found = ck.load_latest() if rank == 0 else None
    name = [found.path.name if found and found.path else None]
    dist.broadcast_object_list(name, src=0)
    load_sharded(state, Path(directory) / str(name[0]))
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    return {"name": name[0], "params": full}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Two sharded checkpoints written once by real ranks (processes are slow to start),
    and what each rank resumed from right after."""
    workdir = tmp_path_factory.mktemp("written")
    results = run_ranks(_save_two_checkpoints, WORLD, str(workdir / "ckpt"), workdir=workdir)
    return workdir / "ckpt", results


def test_every_rank_writes_its_shards_and_rank0_commits(
    written: tuple[Path, list[dict[str, Any]]],
) -> None:
    ckpt, results = written
    assert sorted(p.name for p in ckpt.iterdir()) == [LATEST, "step-000000010", "step-000000020"]
    assert (ckpt / LATEST).read_text() == "step-000000020"
    step20 = ckpt / "step-000000020"
    # One shard file per rank, written by that rank, plus DCP's metadata and our marker.
    assert sorted(p.name for p in step20.iterdir()) == sorted(
        [".metadata", MARKER, *(f"__{r}_0.distcp" for r in range(WORLD))]
    )
    loaded = Checkpointer(ckpt).load_latest()
    assert loaded is not None and loaded.sharded and (loaded.step, loaded.world_size) == (20, 2)
    for r in results:
        assert r["name"] == "step-000000020"
        assert all(torch.equal(v, torch.full_like(v, 2.0)) for v in r["params"].values())
    # The whole checkpoint reads back in one process, as full tensors.
    full = read_full(step20)
    assert torch.equal(full["model"]["0.weight"], torch.full((6, 4), 2.0, dtype=torch.float64))
    assert full["optimizer"]["state"]["0.weight"]["exp_avg"].shape == (6, 4)


def _two_checkpoints(written: tuple[Path, Any], tmp_path: Path) -> Path:
    """A copy of the checkpoints the ranks wrote, for a test to damage."""
    return Path(shutil.copytree(written[0], tmp_path / "ckpt"))


def test_half_written_checkpoints_are_ignored(written: tuple[Path, Any], tmp_path: Path) -> None:
    ckpt = _two_checkpoints(written, tmp_path)
    good = ckpt / "step-000000010"
    newest = ckpt / "step-000000020"
    ck = Checkpointer(ckpt, keep=3)

    # A rank's shards missing: the newest is skipped for the previous complete one.
    (newest / "__1_0.distcp").unlink()
    loaded = ck.load_latest()
    assert loaded is not None and loaded.path == good

    # A shard cut short (a rank died while writing, on a volume without atomic renames).
    shutil.copytree(good, newest, dirs_exist_ok=True)
    shard = newest / "__0_0.distcp"
    os.truncate(shard, shard.stat().st_size // 2)
    loaded = ck.load_latest()
    assert loaded is not None and loaded.path == good

    # No completion marker (or the save never got renamed from its staging name).
    shutil.rmtree(newest)
    shutil.copytree(good, newest)
    (newest / MARKER).unlink()
    shutil.copytree(good, ck.staging_dir(30))
    assert ck.steps() == [10]
    loaded = ck.load_latest()
    assert loaded is not None and loaded.path == good

    # Nothing whole at all: no checkpoint, training starts over.
    (good / "__0_0.distcp").unlink()
    assert ck.load_latest() is None


def test_ranks_resume_from_the_previous_checkpoint_when_the_newest_is_incomplete(
    written: tuple[Path, Any], tmp_path: Path
) -> None:
    ckpt = _two_checkpoints(written, tmp_path)
    (ckpt / "step-000000020" / "__1_0.distcp").unlink()
    # Fresh ranks find the step-10 checkpoint and every rank reads its shards of it.
    results = run_ranks(_resume_only, WORLD, str(ckpt), workdir=tmp_path)
    for r in results:
        assert r["name"] == "step-000000010"
        assert all(torch.equal(v, torch.full_like(v, 1.0)) for v in r["params"].values())


def _resume_only(rank: int, world: int, directory: str) -> dict[str, Any]:
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dtjob_trainer.sharded import ShardedState, load_sharded

    model = nn.Sequential(nn.Linear(4, 6, dtype=torch.float64))
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    state = ShardedState(model, torch.optim.Adam(model.parameters(), lr=0.1))
    found = Checkpointer(directory).load_latest() if rank == 0 else None
    name = [found.path.name if found and found.path else None]
    dist.broadcast_object_list(name, src=0)
    load_sharded(state, Path(directory) / str(name[0]))
    return {"name": name[0], "params": {k: v.full_tensor() for k, v in model.state_dict().items()}}


class _RunsCode:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.target}",))


def test_metadata_that_would_run_code_is_refused(written: tuple[Path, Any], tmp_path: Path) -> None:
    ckpt = _two_checkpoints(written, tmp_path)
    newest = ckpt / "step-000000020"
    meta = read_metadata(newest)  # the genuine metadata reads
    assert meta.storage_data
    pwned = tmp_path / "pwned"
    (newest / ".metadata").write_bytes(pickle.dumps(_RunsCode(pwned)))
    with pytest.raises(pickle.UnpicklingError, match=r"(posix|os)\.system"):
        read_metadata(newest)
    loaded = Checkpointer(ckpt).load_latest()
    assert loaded is not None and loaded.step == 10
    assert not pwned.exists()


def test_retention_counts_files_and_directories_alike(
    written: tuple[Path, Any], tmp_path: Path
) -> None:
    ckpt = _two_checkpoints(written, tmp_path)
    ck = Checkpointer(ckpt, keep=2)
    shutil.copytree(ckpt / "step-000000010", ck.staging_dir(25))  # a save that died
    ck.save(30, "DataParallel", 2, {"model": {"w": torch.zeros(2)}})
    assert ck.steps() == [20, 30]
    assert sorted(p.name for p in ckpt.iterdir()) == [LATEST, "step-000000020", "step-000000030.pt"]
    loaded = ck.load_latest()
    assert loaded is not None and not loaded.sharded and loaded.step == 30
    # `latest` wins over a higher step only when it is whole; the next older one is used.
    (ckpt / LATEST).write_text("step-000000020")
    loaded = ck.load_latest()
    assert loaded is not None and loaded.sharded and loaded.step == 20


def _save_to_own_directory(rank: int, world: int, root: str) -> Any:
    """Rank body: each rank checkpoints into a directory of its own, as pods with an
    emptyDir each would; returns what rank 0's save returned."""
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dtjob_trainer.sharded import ShardedState, save_sharded

    model = nn.Sequential(nn.Linear(4, 6, dtype=torch.float64))
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    state = ShardedState(model, torch.optim.Adam(model.parameters(), lr=0.1))
    ck = Checkpointer(Path(root) / f"pod-{rank}")
    return save_sharded(ck, state, 10, "FSDP", rank, world)


def test_a_directory_not_shared_by_the_ranks_commits_nothing(tmp_path: Path) -> None:
    root = tmp_path / "pods"
    results = run_ranks(_save_to_own_directory, WORLD, str(root), workdir=tmp_path)
    assert results == [None, None]
    for rank in range(WORLD):
        # Nothing committed, no `latest`, and each rank removed its own shards.
        assert list((root / f"pod-{rank}").iterdir()) == []
        assert Checkpointer(root / f"pod-{rank}").load_latest() is None
