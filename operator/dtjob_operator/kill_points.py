"""Test-only fault injection: the operator SIGKILLs itself at a named point of a reconcile.

The promise that an operator killed at any moment restarts into a consistent state is
worth most at the narrowest windows, e.g. between storing a job's admission and creating
its first pod (docs/lifecycle.md). A kill from outside cannot hit a window of a few
milliseconds reliably; the process killing itself there can, and with SIGKILL nothing
runs after it (no finally, no atexit), exactly as when the kernel or the kubelet kills it.

Armed only by DTJOB_TEST_KILL_AT (settings.test_kill_at), which the chart never sets.
Unarmed, `reached()` returns at once and `pod_creates()` holds no lock: nothing changes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)

# The Admitted=True status was just written; nothing of the gang is created yet.
AFTER_ADMISSION_WRITTEN = "admission-written"
# The first pod this process created exists; the rest of its gang does not.
AFTER_FIRST_POD = "first-pod-created"
KILL_POINTS = (AFTER_ADMISSION_WRITTEN, AFTER_FIRST_POD)


class KillPoints:
    """Kills the process at the armed point; `armed` is "" (off) or one of KILL_POINTS."""

    def __init__(self, armed: str) -> None:
        if armed and armed not in KILL_POINTS:
            raise ValueError(f"unknown kill point {armed!r}; one of {KILL_POINTS}")
        self.armed = armed
        self._serial = threading.Lock()

    def reached(self, point: str) -> None:
        """SIGKILL this process if `point` is the armed one."""
        if not self.armed or point != self.armed:
            return
        log.critical("test kill point %s reached: SIGKILL (DTJOB_TEST_KILL_AT)", point)
        os.kill(os.getpid(), signal.SIGKILL)

    @contextlib.contextmanager
    def pod_creates(self) -> Iterator[None]:
        """Around one pod create. Armed for AFTER_FIRST_POD, creates go one at a time:
        a gang's pods are otherwise created concurrently, and a second POST already on its
        way would make "exactly one pod" a race."""
        if self.armed != AFTER_FIRST_POD:
            yield
            return
        with self._serial:
            yield
