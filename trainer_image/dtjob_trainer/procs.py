"""Supervising child processes: a pod's local ranks (`run` with LOCAL_WORLD_SIZE > 1) and
the pods of `launch`. Gang semantics, as in the cluster: SIGTERM/SIGINT are forwarded to
every child; when one child fails the others get a grace period to fail on their own
(they usually notice the lost peer and exit 201), then are terminated. The exit code is
that of the earliest failure (a signal N counts as 128 + N), or 0 when all succeed.
SIGUSR1 prints the supervisor's stacks and is passed on, so one `kill -USR1` of a pod's
first process shows where every rank of it waits (__main__.main registers the dump). It is
passed on to one child at a time, STACKS_APART_SECONDS apart: the dumps share the pod's
stderr, and faulthandler writes a stack in many small pieces, so children dumping at once
interleave them character by character into an unreadable log.
"""

from __future__ import annotations

import faulthandler
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Protocol

POLL_SECONDS = 0.1
STACKS_APART_SECONDS = 0.5
KILL_AFTER_SECONDS = 10.0


def exit_code(returncode: int) -> int:
    """A Popen return code as a shell would report it (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def trainer_command(*args: str) -> list[str]:
    """argv that runs `python -m dtjob_trainer <args>` with this interpreter."""
    return [sys.executable, "-m", "dtjob_trainer", *args]


class Child(Protocol):
    """What `supervise` needs of a child: the part of Popen it uses (a Popen, or
    `forked.ForkedChild`)."""

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def popen(argv: Sequence[str], env: Mapping[str, str]) -> Child:
    """The default way to start a child: a new process running argv."""
    return subprocess.Popen(list(argv), env=dict(env))


def supervise(
    children: Sequence[tuple[Sequence[str], Mapping[str, str]]],
    grace: float = 30.0,
    start: Callable[[Sequence[str], Mapping[str, str]], Child] = popen,
) -> int:
    """Start every (argv, env) child with `start` (a Popen, or anything with its poll,
    returncode, send_signal, terminate and kill: `forked.forked_starter`), wait for all of
    them, return the gang's exit code."""
    procs = [start(argv, env) for argv, env in children]

    def forward(signum: int, frame: FrameType | None) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    to_dump: list[Child] = []  # children still to pass SIGUSR1 on to, one at a time
    next_dump = 0.0

    def stacks(signum: int, frame: FrameType | None) -> None:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        to_dump[:] = list(procs)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, stacks)
    first_failure: int | None = None
    terminate_at = kill_at = float("inf")
    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if to_dump and now >= next_dump:
                child = to_dump.pop(0)
                if child.poll() is None:
                    child.send_signal(signal.SIGUSR1)
                next_dump = now + STACKS_APART_SECONDS
            if first_failure is None:
                for p in procs:
                    if p.returncode not in (None, 0):
                        first_failure = exit_code(p.returncode)
                        terminate_at = now + grace
                        break
            if now >= terminate_at:
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
                terminate_at, kill_at = float("inf"), now + KILL_AFTER_SECONDS
            if now >= kill_at:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                kill_at = float("inf")
            time.sleep(POLL_SECONDS)
    finally:
        for s, handler in previous.items():
            if handler is not None:
                signal.signal(s, handler)
            else:  # a C handler: faulthandler's own dump (__main__.main)
                faulthandler.register(s, file=2, all_threads=True)
    if first_failure is None:
        failed = [exit_code(p.returncode) for p in procs if p.returncode]  # all ended by now
        first_failure = failed[0] if failed else 0
    return first_failure
