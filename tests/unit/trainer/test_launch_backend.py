"""The local launcher's backend: NCCL only when every process has a GPU; a job that asks
for GPUs and falls back to the CPU is told so, never silently."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import CHILD_PATH, a_spec

from dtjob_trainer.config import load_config
from dtjob_trainer.launch import (
    GPU_DEVICE_NODES,
    cuda_device_count,
    gpu_slices,
    requested_gpus,
    resolve_local_backend,
    visible_gpus,
)


def spec(gpus: int, backend: str = "auto") -> dict[str, Any]:
    s = a_spec("DataParallel", workers=2)
    s["roles"]["worker"]["gpus"] = gpus
    s["strategy"]["backend"] = backend
    return s


def test_requested_gpus_sums_the_roles() -> None:
    assert requested_gpus(load_config(spec(4))) == 8
    assert requested_gpus(load_config(spec(0))) == 0


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="needs fewer GPUs than processes")
def test_a_gpu_job_sent_to_the_cpu_is_warned() -> None:
    said: list[str] = []
    assert resolve_local_backend(load_config(spec(1)), said.append) == "gloo"
    (line,) = said
    assert line.startswith("WARNING: the job asks for 2 GPU(s)") and "on the CPU" in line


def test_no_warning_for_a_cpu_job_or_an_explicit_backend() -> None:
    said: list[str] = []
    if torch.cuda.device_count() < 2:
        assert resolve_local_backend(load_config(spec(0)), said.append) == "gloo"
    assert resolve_local_backend(load_config(spec(1, "gloo")), said.append) == "gloo"
    assert said == []


def test_local_pods_get_their_own_gpus_in_rank_order() -> None:
    assert gpu_slices([1, 1, 1], ["0", "1", "2"]) == ["0", "1", "2"]
    assert gpu_slices([2, 2], ["0", "1", "2", "3"]) == ["0,1", "2,3"]
    assert gpu_slices([1, 1], ["4", "7"]) == ["4", "7"]  # the shell's CUDA_VISIBLE_DEVICES
    # Fewer GPUs than processes (gloo, parameter servers): the order wraps around.
    assert gpu_slices([1, 1, 1, 1, 1], ["0", "1"]) == ["0", "1", "0", "1", "0"]
    assert gpu_slices([4], ["0", "1"]) == ["0,1"]
    assert gpu_slices([1, 1], []) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_no_gpus_visible_without_cuda() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == []


def test_the_gpu_count_is_torchs_where_a_device_node_exists(tmp_path: Path) -> None:
    (tmp_path / "nvidia0").touch()
    assert cuda_device_count((str(tmp_path / "nvidia[0-9]*"),)) == torch.cuda.device_count()
    assert cuda_device_count((str(tmp_path / "kfd"),)) == 0


@pytest.mark.skipif(
    any(glob.glob(p) for p in GPU_DEVICE_NODES),
    reason="this machine has a GPU device node: torch must be asked",
)
def test_a_launch_without_gpu_device_nodes_never_imports_torch() -> None:
    # What a CPU launch costs before its first process starts: no torch import.
    code = (
        "import json, sys; from dtjob_trainer import launch; from dtjob_trainer.config import "
        f"load_config; cfg = load_config(json.loads({json.dumps(spec(0))!r})); "
        "print(launch.resolve_local_backend(cfg), launch.visible_gpus({}), 'torch' in sys.modules)"
    )
    env = {"PYTHONPATH": ":".join(CHILD_PATH), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["gloo", "[]", "False"], done.stderr


def test_parameter_server_processes_never_import_distributed_checkpoint() -> None:
    # torch.distributed.checkpoint is a second of every trainer process's start-up; only
    # sharded checkpoints and the full-state API (DataParallel, FSDP, ...) need it.
    modules = ["ps_sync", "ps_async", "hogwild", "easgd", "easgd_round_robin"]
    code = (
        "import sys; import dtjob_trainer.runner, dtjob_trainer.loop; "
        + "; ".join(f"import dtjob_trainer.strategies.{m}" for m in modules)
        + "; print('torch.distributed.checkpoint' in sys.modules)"
    )
    env = {"PYTHONPATH": ":".join(CHILD_PATH), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False"], done.stderr
