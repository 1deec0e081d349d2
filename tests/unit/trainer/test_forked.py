"""A local launch's processes forked from a server that imported torch and the trainer
(`dtjob_trainer.forked`) behave as the interpreters they replace: the contract's
environment reaches each, SIGTERM ends one with 143, a bad environment with 2; and the
launcher forks only on a machine without GPU device nodes, unless told not to."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from unit.trainer import forkserver
from unit.trainer.harness import a_spec, child_env, free_port, launch, trainer_env, wait_for

from dtjob_trainer.config import load_config
from dtjob_trainer.errors import EXIT_CONFIG, EXIT_PREEMPTED
from dtjob_trainer.forked import ForkedChild, forked_starter
from dtjob_trainer.launch import starter
from dtjob_trainer.procs import popen, trainer_command

START = forked_starter(["dtjob_trainer.strategies.data_parallel"])


@pytest.fixture(autouse=True)
def _the_tests_server_first() -> None:
    # One fork server a process: started by START, it would lack the tests' preload.
    forkserver.context()


def test_a_forked_rank_waiting_for_its_peer_exits_143_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(a_spec("DataParallel")))
    env = trainer_env(config, tmp_path / "ckpt", rank=1, world=2, port=free_port(), timeout=60)
    child = START(trainer_command("run"), env)
    assert isinstance(child, ForkedChild)
    time.sleep(2)  # parsing its environment, then waiting for rank 0 (RANK=1 reached it)
    assert child.poll() is None
    assert _parent(child.pid) != os.getpid()  # forked by the server, not started by us
    child.send_signal(signal.SIGTERM)
    wait_for(lambda: child.poll() is not None, 30, "the forked rank to exit")
    assert child.returncode == EXIT_PREEMPTED


def test_a_forked_process_without_the_contract_exits_2() -> None:
    child = START(trainer_command("run"), {"PATH": "/usr/bin:/bin"})
    wait_for(lambda: child.poll() is not None, 30, "the forked process to exit")
    assert child.returncode == EXIT_CONFIG


def test_the_launcher_forks_without_gpu_device_nodes_unless_told_not_to() -> None:
    cfg = load_config(a_spec("DataParallel"))
    assert starter(cfg, {}) is not popen  # this machine has no /dev/nvidia*
    assert starter(cfg, {"DTJOB_LAUNCH_FORK": "0"}) is popen


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_the_command_and_the_tests_launcher_train_alike(tmp_path: Path) -> None:
    # The tests fork `launch` from their own server, and its processes from the launcher
    # (forkserver.py); the command forks them from a server of its own. Same losses, bit
    # for bit (fp64).
    spec = a_spec("DataParallel", steps=6)
    forked = launch(spec, tmp_path / "tests")
    spec_file, ckpt, result = tmp_path / "job.json", tmp_path / "ckpt", tmp_path / "result.pt"
    spec_file.write_text(json.dumps(spec))
    argv = [sys.executable, "-m", "dtjob_trainer", "launch", "--checkpoint-dir", str(ckpt),
            "--result-file", str(result), str(spec_file)]  # fmt: skip
    command = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=120)
    assert command.returncode == 0, command.stdout + command.stderr
    assert forked.rc == 0, forked.output
    assert forked.result is not None and len(forked.result["losses"]) == 6
    assert torch.load(result, weights_only=False)["losses"] == forked.result["losses"]


PROBE = """
import os, sys
sys.path.insert(0, sys.argv[1])  # found through a path this process added, as pytest's
from dtjob_trainer.forked import start_server
def check():
    os._exit(0 if "probe_mod" in sys.modules else 3)
if __name__ == "__main__":
    p = start_server(["probe_mod"]).Process(target=check)
    p.start()
    p.join()
    sys.exit(p.exitcode)
"""


def test_the_server_imports_a_preload_found_through_a_path_the_process_added(
    tmp_path: Path,
) -> None:
    # CPython's server drops the sys.path it is handed: without start_server's PYTHONPATH a
    # forked process would start without the preload (and import it anew, slower).
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "probe_mod.py").write_text("")
    (tmp_path / "probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if "trainer_image" in p)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "probe.py"), str(tmp_path / "mods")],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
