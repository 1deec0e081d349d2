"""Running the real trainer in real processes from tests.

`a_spec(...)` builds a job spec (fluent keyword overrides); `launch(...)` runs
`python -m dtjob_trainer launch` (forked from the tests' server: forkserver.py) and
returns its exit code, output and the RunResult that rank 0 saved; `start_launch(...)`
returns the running process for signal tests; `stop_after_checkpoint(...)` SIGTERMs a
launch once it has checkpointed; `trainer_env(...)` is the contract environment of one
process for tests that start `run` processes themselves.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.forkserver import ForkedLaunch

from dtjob_trainer.launch import GPU_DEVICE_NODES

REPO = Path(__file__).resolve().parents[3]
TRAINER_ROOT = REPO / "trainer_image"
# What a trainer process imports from this checkout: the trainer and the API package.
CHILD_PATH = [str(TRAINER_ROOT), str(REPO / "api")]


def a_spec(
    strategy: str = "DataParallel",
    workers: int | None = 2,
    ps: int | None = None,
    stages: int | None = None,
    procs_per_pod: int | None = None,
    checkpoint_every: int = 1000,
    strategy_extra: dict[str, Any] | None = None,
    **trainer: Any,
) -> dict[str, Any]:
    """A small job spec: fp64 MLP on digits, batch 32, 12 steps, unless overridden."""
    roles: dict[str, Any] = {}
    if workers:
        roles["worker"] = {"replicas": workers}
        if procs_per_pod:
            roles["worker"]["procsPerPod"] = procs_per_pod
    if stages:
        roles["stage"] = {"replicas": stages}
    if ps:
        roles["ps"] = {"replicas": ps}
    t: dict[str, Any] = {
        "batchSize": 32,
        "steps": 12,
        "precision": "fp64",
        "logEverySteps": 4,
        "model": {"type": "MLP", "hiddenSizes": [32, 32, 32]},
        "optimizer": {"type": "SGD", "lr": 0.1},
    }
    t.update(trainer)
    return {
        "strategy": {"type": strategy, **(strategy_extra or {})},
        "roles": roles,
        "trainer": t,
        "checkpoint": {"everySteps": checkpoint_every, "keep": 2},
        "network": {"rendezvousTimeoutSeconds": 60},
    }


def child_env(**extra: str) -> dict[str, str]:
    """This environment with the trainer importable and one thread per process (2 cores)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTJ_", "PET_"))}
    env["PYTHONPATH"] = os.pathsep.join([*CHILD_PATH, env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


@dataclass
class Outcome:
    """What a finished launch left behind."""

    rc: int
    output: str
    result: dict[str, Any] | None
    checkpoint_dir: Path


def _launch_argv(spec_file: Path, ckpt: Path, result: Path, args: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dtjob_trainer",
        "launch",
        "--checkpoint-dir",
        str(ckpt),
        "--result-file",
        str(result),
        *args,
        str(spec_file),
    ]


def start_launch(
    spec: dict[str, Any], workdir: Path, *args: str, name: str = "job"
) -> tuple[subprocess.Popen[str] | ForkedLaunch, Path, Path]:
    """Start a launch; returns (process, checkpoint dir, result file)."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file = workdir / f"{name}.json"
    spec_file.write_text(json.dumps(spec))
    ckpt, result = workdir / f"{name}-ckpt", workdir / f"{name}-result.pt"
    result.unlink(missing_ok=True)
    argv = _launch_argv(spec_file, ckpt, result, list(args))
    if not any(glob.glob(pattern) for pattern in GPU_DEVICE_NODES):
        # Forked from the tests' server, which imported torch and the trainer once
        # (forkserver.py); the command's own output goes to a file beside the spec.
        return ForkedLaunch(argv[3:], child_env(), workdir / f"{name}.log"), ckpt, result
    proc = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    return proc, ckpt, result


# How long one launch may take before the test fails: a bound for a hang, not a speed
# target. Multi-process launches that take 20-60 s alone took over 240 s beside the other
# CI lanes on the 2026-11-28 machine, which ran the whole suite 2.5-3.4x slower than the
# machine of the committed figures.
LAUNCH_SECONDS = 600


def finish(
    proc: subprocess.Popen[str] | ForkedLaunch,
    ckpt: Path,
    result: Path,
    timeout: float = LAUNCH_SECONDS,
) -> Outcome:
    """Wait for a started launch and collect its outcome."""
    output, _ = proc.communicate(timeout=timeout)
    loaded = torch.load(result, weights_only=False) if result.exists() else None
    return Outcome(proc.returncode, output, loaded, ckpt)


# A compiled run on a cold Inductor cache (a new machine) compiles every graph with gcc in
# each rank: on a fresh 2-core machine under the other CI lanes' load one such job took over
# 240 s (2026-11-27); warm, the same job takes seconds.
COMPILE_SECONDS = 540
COMPILE_TIMEOUT = pytest.mark.timeout(COMPILE_SECONDS + 60)


def launch(
    spec: dict[str, Any],
    workdir: Path,
    *args: str,
    name: str = "job",
    timeout: float = LAUNCH_SECONDS,
) -> Outcome:
    """Run a launch to the end."""
    return finish(*start_launch(spec, workdir, *args, name=name), timeout=timeout)


def stop_after_checkpoint(
    spec: dict[str, Any],
    workdir: Path,
    marker: str = "latest",
    name: str = "job",
    until: tuple[Callable[[Path], bool], str] | None = None,
) -> Outcome:
    """Start a launch, SIGTERM it once `marker` (a path under its checkpoint directory, by
    default the `latest` pointer of full and sharded checkpoints) exists, or once `until`'s
    predicate holds of the checkpoint directory (its second item says what is awaited), and
    wait for it to end."""
    proc, ckpt, result = start_launch(spec, workdir, name=name)
    ready, what = until or ((lambda d: (d / marker).exists()), "a checkpoint")
    wait_for(lambda: ready(ckpt) or proc.poll() is not None, LAUNCH_SECONDS, what)
    proc.send_signal(signal.SIGTERM)
    return finish(proc, ckpt, result)


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Poll until predicate() is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def catches(pid: int, sig: int) -> bool:
    """Whether the process has installed a handler for `sig` (Linux: SigCgt in /proc), so a
    test signals it after its start rather than after a sleep that a loaded machine outruns."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (sig - 1) & 1)


def free_port() -> int:
    """A local TCP port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trainer_env(
    config: Path, ckpt: Path, rank: int, world: int, port: int, timeout: int = 60
) -> dict[str, str]:
    """The contract of one single-process pod of a local job (as the operator sets it)."""
    return child_env(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world),
        RANK=str(rank),
        LOCAL_WORLD_SIZE="1",
        NNODES=str(world),
        NODE_RANK=str(rank),
        DTJ_ROLE="worker",
        DTJ_ROLE_INDEX=str(rank),
        DTJ_CONFIG=str(config),
        DTJ_CHECKPOINT_DIR=str(ckpt),
        DTJ_RENDEZVOUS_TIMEOUT=str(timeout),
        DTJ_BACKEND="gloo",
    )
