"""Heartbeats in a real 2-rank DataParallel launch: a rank slowed on purpose is named a
straggler in rank 0's progress.json, and a rank hung on purpose prints the stall line and its
stacks and is named first in `ranks.behind`, while every rank's main thread is blocked."""

from __future__ import annotations

import glob
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from unit.trainer.forkserver import ForkedLaunch, descendants, signal_all
from unit.trainer.harness import a_spec, child_env, wait_for

from dtjob_trainer.heartbeat import STALL_LINE_PATTERN
from dtjob_trainer.launch import GPU_DEVICE_NODES

FAST_HEARTBEATS = {"DTJ_HEARTBEAT_SECONDS": "0.25"}


def start(spec: dict[str, Any], workdir: Path, env: dict[str, str]) -> tuple[Any, Path, Path]:
    """A launch as harness.start_launch starts it, with `env` added for its processes (the
    launcher passes DTJ_HEARTBEAT_SECONDS, DTJ_STALL_DUMP_SECONDS and DTJ_FAULT_* on);
    returns (process, checkpoint dir, output file)."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file, ckpt, output = workdir / "job.json", workdir / "ckpt", workdir / "job.log"
    spec_file.write_text(json.dumps(spec))
    argv = ["launch", "--checkpoint-dir", str(ckpt), str(spec_file)]
    if not any(glob.glob(pattern) for pattern in GPU_DEVICE_NODES):
        return ForkedLaunch(argv, child_env(**env), output), ckpt, output
    command = [sys.executable, "-m", "dtjob_trainer", *argv]
    with output.open("w") as out:
        proc = subprocess.Popen(command, env=child_env(**env), stdout=out, stderr=out)
    return proc, ckpt, output


def progress(ckpt: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((ckpt / "progress.json").read_text()))
    except (OSError, ValueError):
        return {}


def test_a_slowed_rank_is_named_a_straggler(tmp_path: Path) -> None:
    # Rank 1 computes 40 ms longer per step: rank 0 waits for it in every all-reduce, so
    # their wall step times are equal; busy time tells them apart.
    env = {**FAST_HEARTBEATS, "DTJ_FAULT_SLOW_RANK": "1", "DTJ_FAULT_SLOW_SECONDS": "0.04"}
    proc, ckpt, output = start(a_spec("DataParallel", steps=60, logEverySteps=10), tmp_path, env)
    assert proc.wait(timeout=240) == 0, output.read_text()[-3000:]
    ranks = progress(ckpt)["ranks"]
    assert (ranks["count"], ranks["reporting"]) == (2, 2)  # steps: as of the last beats
    (straggler,) = ranks["stragglers"]
    assert straggler["rank"] == 1 and straggler["slowdown"] > 1.5, ranks


def test_a_hung_rank_dumps_its_stacks_and_is_named_first(tmp_path: Path) -> None:
    env = {
        **FAST_HEARTBEATS,
        "DTJ_STALL_DUMP_SECONDS": "3",
        "DTJ_FAULT_HANG_AT_STEP": "6",
        "DTJ_FAULT_HANG_RANK": "1",
    }
    proc, ckpt, output = start(a_spec("DataParallel", steps=1000), tmp_path, env)

    def hung_rank_named() -> bool:
        behind = progress(ckpt).get("ranks", {}).get("behind") or [{}]
        return behind[0].get("rank") == 1 and "fault.py" in behind[0].get("waitingIn", "")

    try:
        wait_for(lambda: hung_rank_named() or proc.poll() is not None, 120, "rank 1 named")
        wait_for(lambda: "dtjob: rank 1 stalled" in output.read_text(), 30, "the stall line")
        time.sleep(0.5)  # the stacks follow the line
    finally:
        signal_all([proc.pid, *descendants(proc.pid)], signal.SIGKILL)
        proc.wait(timeout=30)
    text = output.read_text()
    assert hung_rank_named(), (progress(ckpt), text[-3000:])
    stalls = {m.group("rank"): m for m in STALL_LINE_PATTERN.finditer(text)}
    assert stalls["1"].group("step") == "6", text[-3000:]
    # The hung rank's stack (faulthandler's format) names where it is stuck.
    after = text[stalls["1"].end() :]
    assert "most recent call first" in after and "fault.py" in after, after[:3000]
    ranks = progress(ckpt)["ranks"]
    assert ranks["stopped"] == 2 and ranks["minStep"] == ranks["maxStep"] == 6, ranks
