"""Sharded checkpoints with torch.distributed.checkpoint (DCP): every rank writes its own
shards of the model and optimizer in parallel, so a checkpoint of a model too large for
one process costs one shard's write per rank, not a gather to rank 0 and one big file.

The state is `get_state_dict`'s default (sharded) form: for FSDP2 DTensors keyed by
parameter name, optimizer state keyed by parameter name too. DCP stores each tensor's
global shape and the pieces each rank wrote, and on load every rank reads the pieces that
overlap its own shards, so a checkpoint written by N processes loads into M (FSDP,
CPUOffload) and into an unsharded model (DataParallel reads whole tensors).

Commit protocol (the directory layout is `dtjob_trainer.checkpoint`'s): rank 0 empties
`.step-N.partial/`, all ranks write into it, DCP's save returns once rank 0 has written
the metadata after every rank reported its writes, then rank 0 checks that every shard
file the metadata names is there and renames the directory to `step-N/`. When the
directory is not shared by the pods (an emptyDir per pod), rank 0 sees only its own shards:
the checkpoint is then dropped with a warning rather than committed incomplete. The
training loop runs the same protocol in the background (`dtjob_trainer.async_checkpoint`);
`save_sharded` is the blocking form, for tools and tests.

Checkpoints are read with `dcp_io.SafeReader` (no code runs from the checkpoint volume),
and rank 0 checks that every shard file is whole before the ranks start reading
(`Checkpointer.load_latest`): a failed read after that is an error, not a fallback, since
DCP reads into the live parameters and optimizer state.
"""

from __future__ import annotations

import logging
import pickle
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.dcp_io import SafeReader, read_metadata
from dtjob_trainer.dist import broadcast_object

log = logging.getLogger(__name__)


@dataclass
class ShardedState:
    """A model and its optimizer as DCP reads and writes them (each rank: its shards)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer

    def state_dict(self) -> dict[str, Any]:
        """Collective: {"model", "optimizer"} of this rank's shards, keyed by name."""
        # get_state_dict creates the optimizer's lazily-made state (a zero-lr step) when no
        # step has run yet, so a freshly built optimizer has the slots DCP loads into.
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optimizer": optim_sd}

    def load(self, state: dict[str, Any]) -> None:
        """Collective: install a state read into `state_dict()`'s tensors."""
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )


def prepare_staging(
    checkpoints: Checkpointer, step: int, rank: int, group: dist.ProcessGroup | None
) -> Path:
    """Collective: the empty staging directory of `step`, made by rank 0 before any rank
    writes into it."""
    staging = checkpoints.staging_dir(step)
    if rank == 0:
        # Left over by a save of the same step that did not complete (maybe at another
        # world size): its shards must not mix with this one's.
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    dist.barrier(group=group)
    return staging


def missing_files(metadata: Metadata, staging: Path) -> list[str]:
    """Shard files the metadata names that rank 0 cannot see in `staging`.

    torch 2.13's save returns the metadata with where each piece went (`storage_data`);
    2.11's leaves that out of what it returns and has it only in the `.metadata` file it
    wrote, so the file is read then (without that file nothing was committed at all)."""
    storage = metadata.storage_data
    if storage is None:
        try:
            storage = read_metadata(staging).storage_data
        except (OSError, pickle.UnpicklingError) as exc:
            return [f".metadata ({type(exc).__name__})"]
    files = {info.relative_path for info in (storage or {}).values()}
    return sorted(f for f in files if not (staging / f).is_file())


def drop_message(step: int, missing: list[str], directory: Path) -> str:
    """Why the checkpoint of `step` was dropped, and what to do."""
    return (
        f"checkpoint of step {step} dropped: shard files {', '.join(missing)} written by other "
        f"ranks are not in {directory}, so the checkpoint directory is not shared by the "
        "job's pods (use a ReadWriteMany claim in spec.checkpoint.claimName)"
    )


def save_sharded(
    checkpoints: Checkpointer,
    state: ShardedState,
    step: int,
    strategy: str,
    rank: int,
    world_size: int,
    group: dist.ProcessGroup | None = None,
) -> Path | None:
    """Collective: write the checkpoint of `step` and wait for it; rank 0 returns its path
    once committed (None elsewhere, and on rank 0 when the directory is not shared by every
    rank). The training loop saves in the background instead (`async_checkpoint`)."""
    staging = prepare_staging(checkpoints, step, rank, group)
    metadata = dcp_save(
        state.state_dict(), storage_writer=FileSystemWriter(staging), process_group=group
    )
    missing = missing_files(metadata, staging) if rank == 0 else []
    if broadcast_object(missing, group=group):
        # Every rank cleans its own view: on per-pod volumes rank 0 cannot reach the others.
        shutil.rmtree(staging, ignore_errors=True)
        if rank == 0:
            log.warning(drop_message(step, missing, checkpoints.directory))
        return None
    if rank != 0:
        return None
    return checkpoints.commit_sharded(step, strategy, world_size)


def load_sharded(state: ShardedState, path: Path, group: dist.ProcessGroup | None = None) -> None:
    """Collective: restore `state` from the sharded checkpoint at `path` (checked whole
    by `Checkpointer.load_latest`). A read error raises CheckpointException on every rank
    alike (DCP gathers each rank's outcome)."""
    sd = state.state_dict()
    dcp_load(sd, storage_reader=SafeReader(path), process_group=group)
    state.load(sd)


def read_full(path: Path) -> dict[str, Any]:
    """The whole sharded checkpoint at `path` as full tensors, in one process without a
    process group (tools and tests)."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    with warnings.catch_warnings():  # "no process group: loading in one process" is the point
        warnings.simplefilter("ignore", UserWarning)
        return _load_state_dict_from_keys(storage_reader=SafeReader(path))
