"""Acceptance: bad input and broken gangs end with the contract's exit codes and a clear
message, never a hang: invalid config 2, rendezvous timeout 200, lost peer 201, SIGTERM
before training 143."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from unit.trainer.harness import (
    a_spec,
    catches,
    free_port,
    launch,
    start_launch,
    trainer_env,
    wait_for,
)

from dtjob_trainer.checkpoint import LATEST
from dtjob_trainer.errors import (
    EXIT_CONFIG,
    EXIT_PEER_LOST,
    EXIT_PREEMPTED,
    EXIT_RENDEZVOUS_TIMEOUT,
)

RUN = [sys.executable, "-m", "dtjob_trainer", "run"]


def _start(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        RUN, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _config(tmp_path: Path, spec: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(spec))
    return path


def test_run_with_invalid_config_exits_2_naming_the_field(tmp_path: Path) -> None:
    config = _config(tmp_path, a_spec("DataParallel", workers=3, batchSize=2))
    env = trainer_env(config, tmp_path / "ckpt", rank=0, world=3, port=free_port())
    proc = _start(env)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_CONFIG
    assert "trainer.batchSize: must be at least the worker processes" in out
    assert "(2 is less than 3)" in out


def test_launch_with_a_typo_exits_2_naming_the_field(tmp_path: Path) -> None:
    spec = a_spec("FSDP")
    spec["trainer"]["optimizer"] = {"type": "SGD", "learningRate": 0.1}
    out = launch(spec, tmp_path)
    assert out.rc == EXIT_CONFIG
    assert "trainer.optimizer.learningRate: unknown field" in out.output


def test_worker_without_rank0_times_out_with_200(tmp_path: Path) -> None:
    config = _config(tmp_path, a_spec("DataParallel"))
    port = free_port()  # nobody listens: rank 0 never comes up
    env = trainer_env(config, tmp_path / "ckpt", rank=1, world=2, port=port, timeout=2)
    started = time.monotonic()
    proc = _start(env)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_RENDEZVOUS_TIMEOUT, out
    assert f"rank 0 at 127.0.0.1:{port} not reachable within 2s" in out
    assert time.monotonic() - started < 45


def test_rank0_without_peers_times_out_with_200(tmp_path: Path) -> None:
    config = _config(tmp_path, a_spec("DataParallel"))
    env = trainer_env(config, tmp_path / "ckpt", rank=0, world=2, port=free_port(), timeout=2)
    proc = _start(env)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_RENDEZVOUS_TIMEOUT, out
    assert "rendezvous timed out waiting for every peer to join" in out


def test_sigterm_during_rendezvous_exits_143(tmp_path: Path) -> None:
    config = _config(tmp_path, a_spec("DataParallel"))
    env = trainer_env(config, tmp_path / "ckpt", rank=1, world=2, port=free_port(), timeout=60)
    proc = _start(env)
    # A fixed sleep raced the interpreter's start on a loaded machine: SIGTERM came before
    # the handler and the default action killed the process (-15). Wait for the handler.
    wait_for(lambda: catches(proc.pid, signal.SIGTERM) or proc.poll() is not None, 60, "handler")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_PREEMPTED, out


def test_lost_peer_mid_training_exits_201(tmp_path: Path) -> None:
    spec = a_spec("DataParallel", steps=1_000_000, checkpoint_every=10)
    config, ckpt, port = _config(tmp_path, spec), tmp_path / "ckpt", free_port()
    rank0 = _start(trainer_env(config, ckpt, rank=0, world=2, port=port))
    rank1 = _start(trainer_env(config, ckpt, rank=1, world=2, port=port))
    try:
        wait_for(lambda: (ckpt / LATEST).exists() or rank0.poll() is not None, 120, "training")
        rank1.kill()
        out, _ = rank0.communicate(timeout=120)
        assert rank0.returncode == EXIT_PEER_LOST, out
        assert "communication with a peer failed mid-training" in out
    finally:
        for p in (rank0, rank1):
            if p.poll() is None:
                p.kill()
            p.communicate()


def test_sigusr1_prints_every_processs_stacks_and_training_goes_on(tmp_path: Path) -> None:
    """Where a hung gang waits, without a debugger in the image: SIGUSR1 to the launcher (a
    pod's first process, likewise) prints its stacks and those of every rank it passes the
    signal on to; the gang trains on and still checkpoints on SIGTERM."""
    spec = a_spec("DataParallel", steps=1_000_000, checkpoint_every=10)
    proc, ckpt, _ = start_launch(spec, tmp_path)
    log = tmp_path / "job.log"
    try:
        wait_for(lambda: (ckpt / LATEST).exists() or proc.poll() is not None, 120, "training")
        wait_for(lambda: catches(proc.pid, signal.SIGUSR1), 30, "the handler")
        proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: log.read_text().count("(most recent call first)") >= 3, 30, "3 stacks")
        assert proc.poll() is None  # not the default action (terminate)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == EXIT_PREEMPTED, out[-3000:]
        assert "in supervise" in out and "in run_loop" in out, out[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
