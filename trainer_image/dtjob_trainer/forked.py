"""Starting a local launch's processes by forking them from one that imported torch and the
trainer once (a multiprocessing fork server), instead of starting each as a new interpreter.

Each `python -m dtjob_trainer run` spends 3-4 s of CPU importing torch, torch.distributed
and the strategy before its first collective; a local job of N processes paid that N times
over, on a laptop's cores. Forked from the server, a process starts with them imported and
is otherwise what `run` would be: its own pid and environment (set before anything reads
it), its own process group membership, signals and exit code; it runs the same `main`.

Only where no GPU is visible: the server never touches CUDA, but a forked process must not
inherit anything of a driver, so with GPUs the launcher starts interpreters as before. The
pod's own local ranks (`run` with LOCAL_WORLD_SIZE > 1) are always started as interpreters.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import multiprocessing.context
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from multiprocessing import forkserver as mp_forkserver

from dtjob_trainer.procs import Child

# Imported by the server before any process forks from it.
BASE_PRELOAD = ("torch", "torch.distributed", "dtjob_trainer.runner", "dtjob_trainer.context")


def _main(argv: list[str], environ: dict[str, str]) -> None:
    """In the forked process: the environment `run` would have had, then `run` itself."""
    os.environ.clear()
    os.environ.update(environ)
    from dtjob_trainer.__main__ import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


class ForkedChild:
    """A process forked from the server, with Popen's poll/returncode/signal methods."""

    def __init__(self, ctx: multiprocessing.context.ForkServerContext, argv: list[str],
                 environ: dict[str, str]) -> None:  # fmt: skip
        self._process = ctx.Process(target=_main, args=(argv, environ))
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None and self.pid is not None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_server(
    preload: Sequence[str], environ: Mapping[str, str] | None = None
) -> multiprocessing.context.ForkServerContext:
    """The forkserver context, its server running with `preload` imported, started with
    `environ` added to this process's environment (read by the server's imports alone).

    The server is a new interpreter that drops the sys.path it is handed and skips, without
    a word, a preload module it cannot import (CPython's `multiprocessing.forkserver.main`,
    3.11 to 3.13): a package that this process found through a path it added (pytest's
    `pythonpath`, a test's conftest, a user's code path) was then imported anew by every
    forked process, which still ran, only slower. Started with this process's sys.path as
    PYTHONPATH, the server finds what this process finds. The preload and the environment
    count at the server's start only: a running server is left as it is."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    added = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **(environ or {})}
    saved = {key: os.environ.get(key) for key in added}
    os.environ.update(added)
    try:
        mp_forkserver.ensure_running()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return ctx


def run_args(argv: Sequence[str]) -> list[str]:
    """The arguments of `main` in a trainer command (`python -m dtjob_trainer <args>`)."""
    argv = list(argv)
    if argv[1:3] != ["-m", "dtjob_trainer"]:
        raise ValueError(f"not a trainer command: {argv[:3]}")
    return argv[3:]


def forked_starter(preload: Sequence[str]) -> Callable[[Sequence[str], Mapping[str, str]], Child]:
    """A `start(argv, env)` for `procs.supervise` that forks trainer commands from a server
    that imported BASE_PRELOAD and `preload` (module names; the job's strategy)."""
    # Started with the first process, not when the starter is made; once.
    server = functools.cache(lambda: start_server([*BASE_PRELOAD, *preload]))

    def start(argv: Sequence[str], env: Mapping[str, str]) -> Child:
        return ForkedChild(server(), run_args(argv), dict(env))

    return start
