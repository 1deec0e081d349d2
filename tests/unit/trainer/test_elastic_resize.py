"""Elastic jobs' trainer side (issue 29): a run resized at its checkpoints trains the same
model as an uninterrupted one. The global batch stays the global batch at any world size:
the same samples in the same order, split into contiguous shards, and a batch that does not
divide (32 over 3 processes: 11, 11, 10) weights each rank's loss by its share. Acceptance:
DataParallel and FSDP, fp64 on gloo, 4 -> 2 -> 3 processes at steps 6 and 12 equal an
uninterrupted 4-process run to 1e-10, loss by loss and parameter by parameter."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import a_spec, launch, trainer_env
from unit.trainer.reference import assert_losses_close, assert_params_close

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.config import load_config
from dtjob_trainer.data import shard
from dtjob_trainer.env import read_env
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.runner import check_env_matches

ENV = read_env(trainer_env(Path("config.json"), Path("ckpt"), rank=0, world=4, port=29500))


def _spec(strategy: str, steps: int) -> dict[str, Any]:
    # batchSize 32 (the harness's): even over 4 and 2, uneven over 3.
    return a_spec(strategy, steps=steps, checkpoint_every=6, optimizer={"type": "Adam", "lr": 0.01})


@pytest.mark.parametrize("strategy", ["DataParallel", "FSDP"])
def test_resized_4_2_3_at_checkpoints_equals_an_uninterrupted_4_process_run(
    strategy: str, tmp_path: Path
) -> None:
    whole = launch(_spec(strategy, 18), tmp_path / "whole", "--nproc", "4")
    assert whole.rc == 0 and whole.result is not None, whole.output
    losses: list[float] = []
    out = whole
    for nproc, (start, stop) in zip((4, 2, 3), ((0, 6), (6, 12), (12, 18)), strict=True):
        # One checkpoint directory across the three launches, as one job's across resizes.
        out = launch(_spec(strategy, stop), tmp_path / "resized", "--nproc", str(nproc))
        assert out.rc == 0 and out.result is not None, out.output
        assert out.result["start_step"] == start
        latest = Checkpointer(out.checkpoint_dir).load_latest()
        assert latest is not None and (latest.step, latest.world_size) == (stop, nproc)
        losses += out.result["losses"]
    assert len(losses) == 18
    assert_losses_close(losses, whole.result["losses"], "fp64")
    assert_params_close(out.result["params"], whole.result["params"], "fp64")


@pytest.mark.parametrize(("size", "parts"), [(32, 3), (32, 4), (7, 7), (10, 4)])
def test_shards_are_contiguous_and_concatenate_to_the_global_batch(size: int, parts: int) -> None:
    indices = torch.arange(100, 100 + size)
    pieces = [shard(indices, p, parts) for p in range(parts)]
    assert torch.equal(torch.cat(pieces), indices)
    assert [len(p) for p in pieces] == [len(t) for t in torch.tensor_split(indices, parts)]


def test_an_elastic_config_takes_its_size_from_world_size() -> None:
    """The config of an elastic job is its spec (the most workers); WORLD_SIZE says how many
    this gang has, from minReplicas to replicas pods, and nothing else passes."""
    spec = a_spec("DataParallel", workers=4)
    spec["roles"]["worker"]["minReplicas"] = 2
    cfg = load_config(spec)
    for world in (2, 3, 4):
        sized = check_env_matches(replace(ENV, world_size=world), cfg)
        assert (sized.world_size(), sized.roles.worker.replicas) == (world, world)
    with pytest.raises(ConfigError, match=r"WORLD_SIZE: 1, .* \(or, elastic, 2 to 4 pods of 1\)"):
        check_env_matches(replace(ENV, world_size=1), cfg)
    fixed = load_config(a_spec("DataParallel", workers=4))
    with pytest.raises(
        ConfigError, match=r"WORLD_SIZE: 2, but the config's roles give 4 processes$"
    ):
        check_env_matches(replace(ENV, world_size=2), fixed)
