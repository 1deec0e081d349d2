"""examples/custom-image runs as documented: train.py under a real torchrun on CPU, wrapped in
dtjob-run, fails retryably (75, not torchrun's 1) after a checkpoint, and a second run
resumes from that checkpoint and finishes. The job manifest is a valid job that runs it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from dtjob_api.validation import validate_job

# The subprocesses import dtjob_trainer and dtjob_api from the source tree, whatever
# pytest was run with.
REPO = Path(__file__).resolve().parents[3]
TRAINER_ROOT = REPO / "trainer_image"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(
        [str(TRAINER_ROOT), str(REPO / "api"), os.environ.get("PYTHONPATH", "")]
    ),
}

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "custom-image"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(*args: str) -> list[str]:
    return [
        sys.executable, "-m", "dtjob_trainer.dtjob_run", "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-port", str(free_port()), str(EXAMPLE / "train.py"),
        "--checkpoint-every", "10", *args,
    ]  # fmt: skip


def torchrun(ckpt: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**ENV, "DTJ_CHECKPOINT_DIR": str(ckpt)}
    return subprocess.run(
        command("--steps", "30", *args), env=env, capture_output=True, text=True, timeout=240
    )


def test_train_py_fails_retryably_then_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    first = torchrun(tmp_path, "--fail-at-step", "25")
    assert first.returncode == 75, first.stderr[-2000:]
    assert torch.load(tmp_path / "custom-example.pt")["step"] == 20

    second = torchrun(tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming at step 20" in second.stdout
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    assert (summary["resumed_from"], summary["step"]) == (20, 30)
    assert summary["loss"] < 0.05  # it learned the linear map
    assert torch.load(tmp_path / "custom-example.pt")["step"] == 30


def test_sigterm_checkpoints_and_exits_143(tmp_path: Path) -> None:
    env = {**ENV, "DTJ_CHECKPOINT_DIR": str(tmp_path)}
    stderr = (tmp_path / "stderr").open("wb")  # a file: nobody reads a pipe while it runs
    proc = subprocess.Popen(
        command("--steps", "100000"), env=env, stdout=subprocess.PIPE, stderr=stderr
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while b"resuming at step" not in proc.stdout.readline():
        assert time.monotonic() < deadline and proc.poll() is None
    time.sleep(1)  # a few steps in
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143, (tmp_path / "stderr").read_text()[-3000:]
    assert torch.load(tmp_path / "custom-example.pt")["step"] > 0


def test_the_job_manifest_runs_train_py_under_dtjob_run() -> None:
    doc = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    assert validate_job(doc["spec"], name=doc["metadata"]["name"]) == []
    command = doc["spec"]["trainer"]["command"]
    assert command[:3] == ["python", "/app/dtjob_run.py", "--"] and "/app/train.py" in command
    assert 75 in doc["spec"]["runPolicy"]["retryableExitCodes"]
    dockerfile = (EXAMPLE / "Dockerfile").read_text()
    for copied in ("/app/dtjob_run.py", "/app/dtjob_progress.py", "/app/train.py"):
        assert copied in dockerfile
