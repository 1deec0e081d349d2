"""dtjob-run under a real torchrun on CPU: the failing child's exit code survives the
launcher, and the error file it leaves is what the operator's failure policy reads."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dtjob_operator.policies.launcher_exit import ChildExit, child_exit

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

CHILD = """
import os, sys, time
if int(os.environ["RANK"]) == int(sys.argv[1]):
    sys.exit(int(sys.argv[2]))
print("started", flush=True)
time.sleep(float(sys.argv[3]))
"""


def dtjob_run(tmp_path: Path, *child_args: str) -> subprocess.Popen[bytes]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    with socket.socket() as s:  # a port of its own: other torchrun runs may share the host
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    torchrun += ["--master-port", port]
    env = {**ENV, "TORCHELASTIC_ERROR_FILE": str(tmp_path / "termination-log")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dtjob_trainer.dtjob_run",
            "--",
            *torchrun,
            str(script),
            *child_args,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its process group: what it leaves behind is killed after
    )


def kill_leftovers(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def test_child_exit_code_survives_torchrun(tmp_path: Path) -> None:
    proc = dtjob_run(tmp_path, "1", "75", "5")
    _, stderr = proc.communicate(timeout=120)
    # torchrun's own output still reaches the container log.
    assert b"Root Cause" in stderr
    assert proc.returncode == 75
    message = (tmp_path / "termination-log").read_text()
    body = json.loads(message)["message"]
    assert (body["errorCode"], body["extraInfo"]["rank"]) == (75, "1")
    assert body["extraInfo"]["launcherExitCode"] == "1"
    assert child_exit(message) == ChildExit(75, 1, error="rank 1 exited with code 75")


def test_sigterm_reaches_torchrun_and_exits_143(tmp_path: Path) -> None:
    proc = dtjob_run(tmp_path, "-1", "0", "60")
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    # Both children print to one pipe: their lines may interleave ("startedstarted").
    while b"started" not in proc.stdout.readline():
        assert time.monotonic() < deadline and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    try:
        # Not communicate(): workers torchrun orphans when the signal comes at the wrong
        # moment keep the pipes open; dtjob-run must exit all the same.
        proc.wait(timeout=60)
    finally:
        kill_leftovers(proc)
    assert proc.returncode == 143
    assert child_exit((tmp_path / "termination-log").read_text()).exit_code == 143  # type: ignore[union-attr]


# A launcher that, stopped by SIGTERM, exits 1 and writes nothing (torchrun did once in CI).
SILENT_LAUNCHER = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def python_under_dtjob_run(code: str) -> list[str]:
    """dtjob-run running `python -c code` (a command that is not torchrun)."""
    return [sys.executable, "-m", "dtjob_trainer.dtjob_run", "--", sys.executable, "-c", code]


def test_a_launcher_stopped_by_sigterm_that_names_no_child_exits_143(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        python_under_dtjob_run(SILENT_LAUNCHER),
        env={**ENV, "TORCHELASTIC_ERROR_FILE": str(tmp_path / "t")},
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143  # the runtime's code for SIGTERM, not a permanent 1


@pytest.mark.parametrize(("code", "expected"), [(0, 0), (3, 3)])
def test_other_commands_pass_their_code_through(tmp_path: Path, code: int, expected: int) -> None:
    result = subprocess.run(
        python_under_dtjob_run(f"import sys; sys.exit({code})"),
        env={**ENV, "TORCHELASTIC_ERROR_FILE": str(tmp_path / "t")},
        check=False,
    )
    assert result.returncode == expected
    assert not (tmp_path / "t").exists()


def test_rendezvous_timeout_of_torchrun_exits_200(tmp_path: Path) -> None:
    # A second node whose rank 0 never comes: torchrun gives up on the store after 3 s.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    (tmp_path / "child.py").write_text("pass\n")
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "1",
        "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port,
        "--rdzv-conf", "timeout=3", str(tmp_path / "child.py"),
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "dtjob_trainer.dtjob_run", "--", *torchrun],
        env={**ENV, "TORCHELASTIC_ERROR_FILE": str(tmp_path / "termination-log")},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 200, result.stderr[-2000:]
    child = child_exit((tmp_path / "termination-log").read_text())
    assert child is not None and child.exit_code == 200


@pytest.mark.parametrize(
    ("fixture", "code", "rank"),
    [
        ("log-tail-two-children-root-exit-1.txt", 1, 0),
        ("log-tail-two-children-root-lost-peer.txt", 75, 1),
    ],
)
def test_dtjob_run_picks_the_child_the_operator_would(fixture: str, code: int, rank: int) -> None:
    """Root cause, unless it only lost a peer (201): the same choice as the operator's."""
    from dtjob_trainer.dtjob_run import from_summary

    text = (Path(__file__).parents[1] / "operator" / "fixtures" / "torchrun" / fixture).read_text()
    failure = from_summary(text)
    assert failure is not None and (failure.exit_code, failure.rank) == (code, rank)
    assert child_exit(text) == ChildExit(code, rank)
