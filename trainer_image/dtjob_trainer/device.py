"""Where a rank computes: the pure decision (`choose_device`) and the thin layer that asks
torch for the facts and applies it (`select_device`).

The device follows CUDA availability and what the rank's role asks for, not only the
backend: NCCL needs a GPU per rank, but the parameter-server modes keep gloo for their
protocol (receive-from-any-source and CPU servers are gloo features) and still compute on
a GPU, copying to host memory for every message. Other strategies under gloo stay on the
CPU (their collectives, FSDP's reduce-scatter for one, are not all gloo-on-CUDA safe).
A rank that wanted a GPU and did not get one says so in one line on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dtjob_trainer.config import TrainerConfig
from dtjob_trainer.cuda_diag import diagnose_no_cuda

PS_PREFIX = "ParameterServer/"
STAGE_GROUPS_SUFFIX = "/StageGroups"


@dataclass(frozen=True)
class DeviceChoice:
    """The device of one rank and, when it is not what the job asked for, why."""

    device: str
    """"cpu" or "cuda:<index>"."""
    warning: str | None = None


def choose_device(
    *,
    backend: str,
    strategy: str,
    gpus_requested: int,
    cuda_devices: int,
    local_rank: int,
    no_cuda_hint: str = "",
) -> DeviceChoice:
    """The device of a rank: `strategy` is the registry key (ParameterServer/<mode> for
    the parameter-server modes), `gpus_requested` the GPUs of the rank's pod (its role),
    `cuda_devices` the CUDA devices torch sees. Ranks of a pod share its GPUs round-robin
    by local rank (gloo allows two ranks on one GPU; NCCL jobs get a GPU per rank from
    the layout). `no_cuda_hint` (what the node's driver says) ends the warning of a rank
    that wanted a GPU and sees none."""
    if backend == "nccl":
        if cuda_devices < 1:
            raise ValueError("nccl needs a CUDA device (resolve_backend checks this first)")
        return DeviceChoice(f"cuda:{local_rank % cuda_devices}")
    if gpus_requested < 1 or strategy.endswith(STAGE_GROUPS_SUFFIX):
        # Stage groups pick each stage's device themselves (stage_groups.stage_device).
        return DeviceChoice("cpu")
    if cuda_devices < 1:
        return DeviceChoice(
            "cpu",
            f"WARNING: the pod asks for {gpus_requested} GPU(s) but no CUDA device is visible: "
            f"{strategy} computes on the CPU. {no_cuda_hint}".rstrip(),
        )
    if not strategy.startswith(PS_PREFIX):
        return DeviceChoice(
            "cpu",
            f"WARNING: {strategy} with backend gloo computes on the CPU although the pod "
            f"asks for {gpus_requested} GPU(s); set strategy.backend to auto or nccl to use them.",
        )
    return DeviceChoice(f"cuda:{local_rank % cuda_devices}")


def role_gpus(cfg: TrainerConfig, role: str) -> int:
    """GPUs per pod of `role` (0 for an unknown role: a custom layout asks for none)."""
    spec = getattr(cfg.roles, role, None)
    return int(getattr(spec, "gpus", 0) or 0)


def select_device(
    backend: str,
    strategy: str,
    gpus_requested: int,
    local_rank: int,
    who: str = "",
    warn: Callable[[str], None] | None = None,
) -> torch.device:
    """Apply `choose_device` to this process: set the current CUDA device (NCCL and
    torch.cuda calls use it) and print the warning, if any, on stderr, naming `who`."""
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    choice = choose_device(
        backend=backend,
        strategy=strategy,
        gpus_requested=gpus_requested,
        cuda_devices=devices,
        local_rank=local_rank,
        no_cuda_hint=diagnose_no_cuda() if devices == 0 and gpus_requested > 0 else "",
    )
    if choice.warning:
        line = (
            choice.warning.replace("WARNING: ", f"WARNING: {who}: ", 1) if who else choice.warning
        )
        (warn or _stderr)(line)
    device = torch.device(choice.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
