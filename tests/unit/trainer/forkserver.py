"""The tests' fork server: one per pytest process, which imports torch, its distributed
packages, every strategy and the launcher once (rank_preload.py). `run_ranks` forks its
ranks from it, and `ForkedLaunch` forks `dtjob-trainer launch` from it, whose launcher then
forks the pods' processes from itself. Started as interpreters, each launch paid its own
fork server's imports (3-4 s of CPU of a small launch's 4-5 s) and its launcher's.

A forked launcher runs `dtjob_trainer.__main__.main(["launch", ...])`, the command's own
code, with the environment a subprocess would have had and its output in a file. What
differs from the command is where its processes fork from: the launcher itself, which has
what the command's server would import, instead of a server of its own
(`dtjob_trainer.forked`; tests/unit/trainer/test_forked.py runs the command's own path,
and shows both train alike). With GPU device nodes the harness starts the command as a
subprocess, as the launcher would start interpreters there.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dtjob_trainer.forked import start_server

PRELOAD = ["unit.trainer.rank_preload", "unit.trainer.ranks", "unit.trainer.forkserver"]


_checked = False
STACKS_SECONDS = 2.0  # for a hung launch's processes to print their stacks
STACKS_CHARS = 20_000


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        found = children.get(todo.pop(0), [])
        out += found
        todo += found
    return out


def signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _exit_unless_preloaded() -> None:
    """In a fork of the server: exit 0 if the server had imported the preload."""
    os._exit(0 if PRELOAD[0] in sys.modules else 3)


def context() -> multiprocessing.context.ForkServerContext:
    """The forkserver context, its server running with PRELOAD imported, which is checked
    once per process: a server that could not import it forked every rank and launcher
    without it, each importing torch and the strategies anew (a `make test` whose
    PYTHONPATH lacked tests/ ran the unit lane four times slower, and passed).

    OpenMP reads OMP_NUM_THREADS once, when torch loads, so the server is started with the
    one thread a test's process gets (`child_env`): set later, in a forked process, the
    variable would not count, and torch.set_num_threads before a fork leaves the children
    an invalid thread pool."""
    global _checked
    # One server a process, its preload read when it starts: whoever starts it first wins
    # (test_forked.py calls this before the product's `forked_starter` can).
    ctx = start_server(PRELOAD, {"OMP_NUM_THREADS": "1"})
    if not _checked:
        probe = ctx.Process(target=_exit_unless_preloaded)
        probe.start()
        probe.join()
        if probe.exitcode != 0:
            raise RuntimeError(
                f"the tests' fork server did not import {PRELOAD}: its forks exit "
                f"{probe.exitcode} (sys.path {sys.path})"
            )
        _checked = True
    return ctx


def _fork_from_here(cfg: Any, environ: Mapping[str, str]) -> Any:
    """`launch.starter` in a forked launcher: the command's choice, but a fork of this
    process (which has torch and every strategy imported) where it would fork a server's."""
    from dtjob_trainer.forked import ForkedChild, run_args
    from dtjob_trainer.procs import popen

    if _command_starter(cfg, environ) is popen:  # DTJOB_LAUNCH_FORK=0
        return popen
    ctx = multiprocessing.get_context("fork")

    def start(argv: Sequence[str], env: Mapping[str, str]) -> Any:
        return ForkedChild(ctx, run_args(argv), dict(env))

    return start


_command_starter: Any = None


def _launch_main(argv: list[str], environ: dict[str, str], output: str) -> None:
    """In the forked launcher: the subprocess's output file and environment, then `main`."""
    global _command_starter
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(environ)
    from dtjob_trainer import launch
    from dtjob_trainer.__main__ import main

    _command_starter = launch.starter
    launch.starter = _fork_from_here
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


class ForkedLaunch:
    """`python -m dtjob_trainer launch <argv>` forked from the server: the Popen methods
    the harness and the tests use (poll, returncode, send_signal, wait, communicate)."""

    def __init__(self, argv: list[str], env: Mapping[str, str], output: Path) -> None:
        self._output = output
        self._process = context().Process(target=_launch_main, args=(argv, dict(env), str(output)))
        self._process.start()
        self.pid = self._process.pid
        self.args = argv

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode  # -N when killed by signal N, as Popen's

    def poll(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None and self.pid is not None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self._process.kill()

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            expired = subprocess.TimeoutExpired(["dtjob_trainer", *self.args], timeout or 0)
            if self.pid is None:
                raise expired
            # Where it hangs: the launcher prints its stacks and passes SIGUSR1 on to its
            # ranks, which print theirs (procs.supervise), then the whole tree is killed.
            tree = [self.pid, *descendants(self.pid)]
            before = len(self._output.read_text(errors="replace"))
            signal_all([self.pid], signal.SIGUSR1)
            time.sleep(STACKS_SECONDS)
            signal_all(tree, signal.SIGKILL)
            text = self._output.read_text(errors="replace")
            head, stacks = text[max(0, before - 3000) : before], text[before:][:STACKS_CHARS]
            raise AssertionError(
                f"{expired}; its output ends:\n{head}\n--- stacks (SIGUSR1):\n{stacks}"
            ) from expired
        return self._process.exitcode

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout)
        return self._output.read_text(errors="replace"), None
