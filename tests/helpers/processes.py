"""Stopping a helper process (Kueue, Prometheus, a benchmark's operator): SIGTERM, then
SIGKILL if it has not exited after `grace` seconds."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen[bytes], grace: float = 20) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
