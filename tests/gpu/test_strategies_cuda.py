"""Every strategy of the bundled trainer on CUDA (`make test-gpu`; skipped without CUDA).

NCCL refuses two ranks on one GPU, so the NCCL cases run one rank per GPU and skip, saying
how many GPUs they need, on a machine with fewer. The parameter-server modes keep gloo for
their protocol and put several ranks on one GPU (their messages go through host copies),
so they run on a single GPU. Each case must finish, compute on CUDA (the rank-0 log line
names the device) and train (the loss goes down).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import a_spec, launch
from unit.trainer.reference import reference_run

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.skipif(GPUS == 0, reason="no CUDA device visible to torch")


def gpu_spec(strategy: str, backend: str, role: str = "worker", **kw: Any) -> dict[str, Any]:
    spec = a_spec(strategy, precision="fp32", steps=20, **kw)
    spec["strategy"]["backend"] = backend
    spec["roles"][role]["gpus"] = 1
    spec["roles"][role]["procsPerPod"] = 1
    return spec


def ps(mode: str, workers: int = 2, servers: int | None = 1, **extra: Any) -> dict[str, Any]:
    return gpu_spec(
        "ParameterServer",
        "gloo",
        workers=workers,
        ps=servers,
        strategy_extra={"parameterServer": {"mode": mode, **extra}},
    )


def hogwild() -> dict[str, Any]:
    # Two lock-free processes on halves of the batch: 20 SGD steps leave the loss within
    # noise of where it started (seen on an H100), so Adam and 60 steps, as on CPU.
    spec = ps("Hogwild", workers=1, servers=None, hogwildProcesses=2)
    spec["trainer"].update(steps=60, optimizer={"type": "Adam", "lr": 0.003})
    return spec


def nccl_ps(mode: str, servers: int | None) -> dict[str, Any]:
    spec = ps(mode, servers=servers)
    spec["strategy"]["backend"] = "nccl"
    if servers:
        spec["roles"]["ps"].update(gpus=1, procsPerPod=1)
    return spec


# name -> (spec, GPUs it needs)
CASES: dict[str, tuple[dict[str, Any], int]] = {
    "DataParallel": (gpu_spec("DataParallel", "nccl", workers=1), 1),
    "DataParallel-2": (gpu_spec("DataParallel", "nccl", workers=2), 2),
    "FSDP": (gpu_spec("FSDP", "nccl", workers=1), 1),
    "FSDP-2": (gpu_spec("FSDP", "nccl", workers=2), 2),
    "CPUOffload": (gpu_spec("CPUOffload", "nccl", workers=1), 1),
    "Auto": (gpu_spec("Auto", "nccl", workers=1), 1),
    "TensorParallel": (
        gpu_spec(
            "TensorParallel",
            "nccl",
            workers=2,
            strategy_extra={"tensorParallel": {"size": 2}},
        ),
        2,
    ),
    "ModelParallel": (gpu_spec("ModelParallel", "nccl", role="stage", workers=None, stages=2), 2),
    "Pipeline": (
        gpu_spec(
            "Pipeline",
            "nccl",
            role="stage",
            workers=None,
            stages=2,
            strategy_extra={"pipeline": {"schedule": "1F1B", "microbatches": 4}},
        ),
        2,
    ),
    "Hybrid": (
        gpu_spec(
            "Hybrid",
            "nccl",
            role="stage",
            workers=None,
            stages=4,
            strategy_extra={"hybrid": {"dataParallel": 2}, "pipeline": {"microbatches": 2}},
        ),
        4,
    ),
    # Parameter servers: gloo protocol, several ranks sharing one GPU.
    "PS-Sync-allreduce": (ps("Sync", servers=None), 1),
    "PS-Sync-servers": (ps("Sync"), 1),
    "PS-Async": (ps("Async"), 1),
    "PS-EASGD-sync": (ps("EASGD", servers=None), 1),
    "PS-EASGD-async": (ps("EASGD"), 1),
    "PS-EASGDRoundRobin": (ps("EASGDRoundRobin"), 1),
    "PS-Hogwild": (hogwild(), 1),
    # What the operator's `auto` picks for Sync and synchronous EASGD with GPUs everywhere.
    "PS-Sync-nccl": (nccl_ps("Sync", servers=1), 3),
    "PS-EASGD-sync-nccl": (nccl_ps("EASGD", servers=None), 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_strategy_trains_on_cuda(name: str, tmp_path: Path) -> None:
    spec, needs = CASES[name]
    if needs > GPUS:
        pytest.skip(f"needs {needs} GPUs (NCCL: one rank per GPU), {GPUS} visible")
    out = launch(spec, tmp_path, timeout=600)
    assert out.rc == 0, out.output
    assert "device cuda" in out.output, out.output
    assert "computes on the CPU" not in out.output, out.output
    assert out.result is not None
    losses = out.result["losses"]
    assert losses and all(math.isfinite(x) for x in losses)
    assert min(losses[-5:]) < losses[0], losses


def test_a_cuda_run_matches_the_cpu_reference(tmp_path: Path) -> None:
    # One rank on CUDA computes what a CPU process computes, up to TF32 and kernel rounding.
    spec = gpu_spec("DataParallel", "nccl", workers=1)
    spec["trainer"]["precision"] = "fp64"  # TF32 leaves fp64 alone: a tight comparison
    out = launch(spec, tmp_path, timeout=600)
    assert out.rc == 0, out.output
    assert out.result is not None
    torch.testing.assert_close(
        torch.tensor(out.result["losses"]),
        torch.tensor(reference_run(spec).losses),
        rtol=1e-9,
        atol=1e-9,
    )


@pytest.mark.parametrize("strategy", ["DataParallel", "FSDP"])
def test_speed_options_on_a_small_gpt(strategy: str, tmp_path: Path) -> None:
    spec = gpu_spec(
        strategy,
        "nccl",
        workers=1,
        model={"type": "GPT", "layers": 2, "dModel": 64, "heads": 4, "seqLen": 32},
        dataset={"type": "SyntheticTokens"},
        optimizer={"type": "AdamW", "lr": 0.001},
        compile=True,
        activationCheckpointing=True,
    )
    spec["trainer"]["precision"] = "bf16"
    out = launch(spec, tmp_path, timeout=600)
    assert out.rc == 0, out.output
    assert "model blocks: activation checkpointing + torch.compile" in out.output
    assert out.result is not None and math.isfinite(out.result["losses"][-1])
