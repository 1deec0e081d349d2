"""The test-only kill points: off unless armed, and armed they kill at that point only."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pydantic
import pytest

from dtjob_operator.kill_points import AFTER_ADMISSION_WRITTEN, AFTER_FIRST_POD, KillPoints
from dtjob_operator.settings import OperatorSettings

OPERATOR = Path(__file__).resolve().parents[3] / "operator"


def run_reaching(armed: str, point: str) -> subprocess.CompletedProcess[str]:
    code = (
        "from dtjob_operator.kill_points import KillPoints\n"
        f"KillPoints({armed!r}).reached({point!r})\n"
        "print('alive')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(OPERATOR)},
        timeout=60,
    )


def test_off_by_default_and_only_known_points() -> None:
    assert OperatorSettings().test_kill_at == ""
    with pytest.raises(pydantic.ValidationError):
        OperatorSettings(test_kill_at="somewhere")
    with pytest.raises(ValueError, match="unknown kill point"):
        KillPoints("somewhere")
    KillPoints("").reached(AFTER_ADMISSION_WRITTEN)  # still here


def test_armed_it_sigkills_at_its_point_and_nowhere_else() -> None:
    killed = run_reaching(AFTER_ADMISSION_WRITTEN, AFTER_ADMISSION_WRITTEN)
    assert killed.returncode == -signal.SIGKILL and "alive" not in killed.stdout
    other = run_reaching(AFTER_ADMISSION_WRITTEN, AFTER_FIRST_POD)
    assert other.returncode == 0 and "alive" in other.stdout


def concurrent_inside(points: KillPoints) -> int:
    """How many of two threads are inside pod_creates() at once."""
    inside, most, lock = 0, 0, threading.Lock()
    barrier = threading.Barrier(2, timeout=0.5)

    def create() -> None:
        nonlocal inside, most
        with points.pod_creates():
            with lock:
                inside += 1
                most = max(most, inside)
            # Both meet inside, unless creates are serialised (then the wait times out).
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
            with lock:
                inside -= 1

    threads = [threading.Thread(target=create) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return most


def test_pod_creates_are_serialised_only_when_armed_after_the_first_pod() -> None:
    assert concurrent_inside(KillPoints("")) == 2
    assert concurrent_inside(KillPoints(AFTER_ADMISSION_WRITTEN)) == 2
    assert concurrent_inside(KillPoints(AFTER_FIRST_POD)) == 1
