"""Where a rank computes: from CUDA availability and what its role asks for, not from the
backend alone. Parameter-server ranks keep gloo for their protocol and still use a GPU."""

from __future__ import annotations

import pytest
import torch
from unit.trainer.harness import a_spec

from dtjob_trainer.config import load_config
from dtjob_trainer.device import choose_device, role_gpus, select_device
from dtjob_trainer.launch import local_fallback_warning

PS_MODES = ["Sync", "Async", "Hogwild", "EASGD", "EASGDRoundRobin"]


# (backend, strategy, GPUs the pod asks for, CUDA devices seen, local rank) -> device;
# every one of these is chosen without a warning.
QUIET = [
    *[("gloo", f"ParameterServer/{mode}", 1, 2, 1, "cuda:1") for mode in PS_MODES],
    # more PS ranks than GPUs: they share the pod's GPUs round robin
    *[("gloo", "ParameterServer/Async", 1, 1, rank, "cuda:0") for rank in range(3)],
    ("gloo", "ParameterServer/Sync", 0, 4, 0, "cpu"),  # the role asks for no GPU
    ("gloo", "DataParallel", 0, 2, 0, "cpu"),
    # stage groups place their own stages (CPU and GPU in one pipeline)
    ("gloo", "Pipeline/StageGroups", 1, 1, 0, "cpu"),
    *[("nccl", s, 0, 8, 3, "cuda:3") for s in ("DataParallel", "ParameterServer/Sync", "FSDP")],
]


@pytest.mark.parametrize(("backend", "strategy", "gpus", "cuda", "local_rank", "device"), QUIET)
def test_the_device_follows_cuda_and_the_role(
    backend: str, strategy: str, gpus: int, cuda: int, local_rank: int, device: str
) -> None:
    choice = choose_device(
        backend=backend,
        strategy=strategy,
        gpus_requested=gpus,
        cuda_devices=cuda,
        local_rank=local_rank,
    )
    assert choice == type(choice)(device, None)


def test_nccl_without_cuda_is_an_error() -> None:
    with pytest.raises(ValueError):
        choose_device(
            backend="nccl", strategy="FSDP", gpus_requested=1, cuda_devices=0, local_rank=0
        )


def test_a_ps_rank_without_cuda_falls_back_loudly() -> None:
    choice = choose_device(
        backend="gloo",
        strategy="ParameterServer/EASGD",
        gpus_requested=2,
        cuda_devices=0,
        local_rank=0,
        no_cuda_hint="driver 470.1 too old",
    )
    assert choice.device == "cpu"
    assert choice.warning is not None
    assert choice.warning.startswith("WARNING: the pod asks for 2 GPU(s)")
    assert "on the CPU" in choice.warning and choice.warning.endswith("driver 470.1 too old")


def test_any_rank_that_wanted_a_gpu_and_sees_none_says_why() -> None:
    choice = choose_device(
        backend="gloo",
        strategy="DataParallel",
        gpus_requested=1,
        cuda_devices=0,
        local_rank=0,
        no_cuda_hint="no NVIDIA driver",
    )
    assert choice.device == "cpu" and choice.warning is not None
    assert (
        "no CUDA device is visible" in choice.warning and "strategy.backend" not in choice.warning
    )


def test_other_strategies_under_gloo_stay_on_the_cpu_and_say_so() -> None:
    loud = choose_device(
        backend="gloo", strategy="DataParallel", gpus_requested=1, cuda_devices=2, local_rank=0
    )
    assert loud.device == "cpu" and loud.warning and "strategy.backend" in loud.warning


def test_role_gpus_reads_the_ranks_role() -> None:
    spec = a_spec("ParameterServer", workers=2, ps=1, strategy_extra={"parameterServer": {}})
    spec["roles"]["worker"]["gpus"] = 2
    cfg = load_config(spec)
    assert role_gpus(cfg, "worker") == 2
    assert role_gpus(cfg, "ps") == 0
    assert role_gpus(cfg, "stage") == 0


def test_the_launcher_names_counts_and_what_to_do() -> None:
    ps = local_fallback_warning(True, 4, 1, 5)
    assert "4 GPU(s)" in ps and "1 for 5 processes" in ps and "share the 1 GPU(s)" in ps
    dp = local_fallback_warning(False, 4, 2, 4)
    assert "on the CPU" in dp and "--nproc 2" in dp
    none = local_fallback_warning(True, 4, 0, 4, "no NVIDIA driver")
    assert "no CUDA device is visible" in none and none.endswith("no NVIDIA driver")


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the fallback of a machine without CUDA"
)
def test_select_device_names_the_rank_that_falls_back() -> None:
    said: list[str] = []
    device = select_device(
        "gloo", "ParameterServer/Sync", 1, 0, who="rank 3 (worker-1)", warn=said.append
    )
    assert device == torch.device("cpu")
    (line,) = said
    assert line.startswith("WARNING: rank 3 (worker-1): the pod asks for 1 GPU(s)")
    assert "driver" in line  # the diagnosis of why torch sees no GPU


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_select_device_puts_a_ps_rank_on_its_gpu() -> None:
    said: list[str] = []
    device = select_device("gloo", "ParameterServer/Async", 1, 0, warn=said.append)
    assert device.type == "cuda" and said == []
