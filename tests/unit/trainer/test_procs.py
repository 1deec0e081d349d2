"""Gang supervision of child processes (the pod's local ranks, the launcher's pods)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from unit.trainer.harness import catches, wait_for

from dtjob_trainer.procs import exit_code

# A tiny supervisor program, so the test can signal it like the kubelet signals a pod.
SUPERVISOR = textwrap.dedent(
    """
    import sys
    from dtjob_trainer.procs import supervise
    children = [([sys.executable, "-c", code], {}) for code in sys.argv[2:]]
    sys.exit(supervise(children, grace=float(sys.argv[1])))
    """
)
SLEEP_TERM_143 = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
    "time.sleep(60)"
)
SLEEP_IGNORE_TERM = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)"
)


def _supervisor(tmp_path: Path, grace: float, *codes: str) -> subprocess.Popen[str]:
    script = tmp_path / "supervisor.py"
    script.write_text(SUPERVISOR)
    repo = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo / "trainer_image"), str(repo / "api")]),
    }
    return subprocess.Popen([sys.executable, str(script), str(grace), *codes], env=env, text=True)


def test_all_succeed_gives_0(tmp_path: Path) -> None:
    proc = _supervisor(tmp_path, 5, "pass", "pass")
    assert proc.wait(timeout=30) == 0


def test_earliest_failure_decides_and_stragglers_are_terminated(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = _supervisor(tmp_path, 1, "import sys; sys.exit(201)", SLEEP_TERM_143)
    assert proc.wait(timeout=30) == 201
    assert time.monotonic() - started < 20  # not the sleeper's 60 s


def test_sigterm_is_forwarded_to_every_child(tmp_path: Path) -> None:
    proc = _supervisor(tmp_path, 30, SLEEP_TERM_143, SLEEP_TERM_143)
    wait_for(lambda: catches(proc.pid, signal.SIGTERM) or proc.poll() is not None, 30, "handler")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143


def test_children_ignoring_sigterm_are_killed(tmp_path: Path) -> None:
    proc = _supervisor(tmp_path, 0.5, "import sys; sys.exit(1)", SLEEP_IGNORE_TERM)
    assert proc.wait(timeout=40) == 1


def test_signals_count_as_128_plus_n() -> None:
    assert exit_code(-9) == 137 and exit_code(-15) == 143 and exit_code(3) == 3


class _Sleeper:
    """A child for `supervise` that only notes when it got SIGUSR1, and ends once it has."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.dumped_at: float | None = None

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if sig == signal.SIGUSR1:
            self.dumped_at, self.returncode = time.monotonic(), 0

    def terminate(self) -> None:
        self.returncode = -signal.SIGTERM

    def kill(self) -> None:
        self.returncode = -signal.SIGKILL


def test_sigusr1_reaches_the_children_one_at_a_time(capfd) -> None:  # type: ignore[no-untyped-def]
    # The children's dumps share the pod's stderr and faulthandler writes in small pieces:
    # two at once interleave into an unreadable log (seen in CI). They are passed the
    # signal apart, after the supervisor's own dump.
    from itertools import pairwise
    from threading import Timer

    from dtjob_trainer.procs import STACKS_APART_SECONDS, supervise

    kids = [_Sleeper(), _Sleeper(), _Sleeper()]
    starting = iter(kids)
    Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    assert supervise([([], {})] * 3, start=lambda argv, env: next(starting)) == 0
    assert "in test_sigusr1_reaches_the_children_one_at_a_time" in capfd.readouterr().err
    times = [k.dumped_at for k in kids if k.dumped_at is not None]
    assert len(times) == 3
    gaps = [b - a for a, b in pairwise(times)]
    assert min(gaps) >= STACKS_APART_SECONDS, gaps
