"""The operator on the host (`python -m dtjob_operator`, as `make dev-up` runs it), shared by
the integration tests and the benchmarks."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process ends, however it ends. A
    pytest killed from outside runs no fixture teardown, and an operator it left would go
    on reconciling every job of the cluster beside the next session's own (seen: jobs
    admitted twice, each Event recorded twice)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class OperatorProcess:
    """A host operator process with its log in a file; stop/start at will."""

    def __init__(self, kubeconfig: Path, log: Path, env: dict[str, str]) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, may_exit: bool = False) -> None:
        """Start it; unless `may_exit` (an operator armed to kill itself soon,
        DTJOB_TEST_KILL_AT), an exit in its first second is an error."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PYTHONPATH": os.pathsep.join([str(TOP / "api"), str(TOP / "operator")]),
            "DTJOB_METRICS_PORT": "0",
            "DTJOB_LIVENESS_ENDPOINT": "",
            "DTJOB_STANDALONE": "true",
            **self.env,
        }
        out = self.log.open("ab")
        # The signal follows the thread that forks: only the main thread lives as long as
        # the test process (a pool thread's operator would die with that thread).
        main = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dtjob_operator"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if main else None,
        )
        time.sleep(1)
        if not may_exit and self.proc.poll() is not None:
            raise RuntimeError(f"operator exited on start; see {self.log}")

    def kill(self) -> None:
        """SIGKILL: the harshest way an operator can stop (no clean-up of any kind)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def wait_exit(self, timeout: float) -> int:
        """Wait until the process has ended by itself; its return code (-9: SIGKILL)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            msg = f"operator still running after {timeout:.0f} s; see {self.log}"
            raise TimeoutError(msg) from None

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.kill()
        self.start()
