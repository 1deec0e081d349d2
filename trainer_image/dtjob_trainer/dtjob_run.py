"""dtjob-run: run a launcher (torchrun) and exit with the failing child's code.

    dtjob-run -- torchrun --nproc-per-node=2 train.py

torchrun exits 1 whenever a child fails, whatever the child's code, so an exit-code-aware
restart policy would see every failure as permanent. dtjob-run runs the command, passes its
output through, forwards SIGTERM/SIGINT to it (so the children can checkpoint), and when it
exits non-zero, exits with the code of the child whose failure decides instead (the first
observed, unless that child only lost a peer: exit 201 is never the cause):

- from torchrun's error file (JSON, `message.errorCode`; `SignalException ... got signal: N`
  when torchrun itself was stopped by a signal -> 128 + N; a timeout reaching rank 0's
  rendezvous store -> 200, the contract's rendezvous timeout), which dtjob-run points to a
  file of its own through TORCHELASTIC_ERROR_FILE;
- else from the "Root Cause" block of torchrun's failure summary on stderr (a child that
  called sys.exit(75) or was killed writes no error file); torchrun reports signals as
  negative codes, which become 128 + signal, as a container runtime reports them.

It then writes the result in torchelastic's error-file format, with the child's global rank in
`extraInfo.rank`, to the TORCHELASTIC_ERROR_FILE it was given (the env contract sets the
container's termination message path), so the operator names the child even when the exit
code alone would do. Any other command's exit code passes through unchanged.

Standard library only: it may be copied into any image.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long to read the launcher's stderr after it exited (see run()).
PUMP_DRAIN_SECONDS = 5.0
TAIL_LINES = 200  # torchrun's summary is the last ~30 lines of its stderr
MESSAGE_LIMIT = 1024  # the kubelet keeps 4096 bytes of a termination message

_SIGNAL = re.compile(r"SignalException: Process \d+ got signal: (\d+)")
# torchrun could not reach the rendezvous store on rank 0's pod in time.
_RENDEZVOUS = re.compile(
    r"(DistNetworkError|DistStoreError|RendezvousTimeoutError).*(timed out|timeout)",
    re.IGNORECASE,
)
RENDEZVOUS_TIMEOUT_CODE = 200  # the env contract's code for it: retryable
_ROOT_CAUSE_HEADER = "Root Cause (first observed failure):"
_FAILURES_HEADER = "Failures:"
# One child of the summary: `rank : 1 (local_rank: 1)` then `exitcode : 75 (pid: 42)`.
_SUMMARY_BLOCK = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")
PEER_LOST_CODE = 201  # the env contract: this process lost a peer mid-training


@dataclass(frozen=True)
class ChildFailure:
    """What dtjob-run found out about the failure."""

    exit_code: int
    rank: int | None
    message: str


def container_code(code: int) -> int:
    """A process exit status as a container runtime reports it: signal N -> 128 + N."""
    return 128 - code if code < 0 else code


def from_error_file(path: Path) -> ChildFailure | None:
    """The failure torchrun wrote to its error file, if it wrote one with a code in it."""
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    body = data.get("message") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        return None
    message = str(body.get("message") or "")
    code = body.get("errorCode")
    if isinstance(code, int) and code != 0:
        return ChildFailure(container_code(code), None, message)
    if match := _SIGNAL.search(message):
        return ChildFailure(128 + int(match.group(1)), None, message)
    if _RENDEZVOUS.search(message):
        return ChildFailure(RENDEZVOUS_TIMEOUT_CODE, None, message)
    return None


def from_summary(stderr_tail: str) -> ChildFailure | None:
    """The failure that decides, from torchrun's ChildFailedError summary: its root cause
    ("first observed"), unless that child only lost a peer (201, the contract's code for it)
    and another child failed otherwise. Children that die in the same second are listed in
    no useful order, and the peers of a child that exits die of it: a lost peer is a
    consequence, never the cause. (The operator's policies/launcher_exit.py picks the same.)"""
    root_at = stderr_tail.find(_ROOT_CAUSE_HEADER)
    if root_at < 0:
        return None
    root = _summary_blocks(stderr_tail[root_at:])[:1]
    failures_at = stderr_tail.rfind(_FAILURES_HEADER, 0, root_at)
    others = _summary_blocks(stderr_tail[failures_at:root_at]) if failures_at >= 0 else []
    listed = root + others
    if not listed:
        return None
    rank, code = next((f for f in listed if f[1] != PEER_LOST_CODE), listed[0])
    exit_code = container_code(code)
    who = f"rank {rank}" if rank is not None else "a child process"
    return ChildFailure(exit_code, rank, f"{who} exited with code {exit_code}")


def _summary_blocks(text: str) -> list[tuple[int | None, int]]:
    return [(int(rank) if rank else None, int(code)) for rank, code in _SUMMARY_BLOCK.findall(text)]


def resolve(error_file: Path, stderr_tail: str) -> ChildFailure | None:
    """The failure behind a launcher's non-zero exit: error file first, then the summary
    (for the rank, which the error file never names); None when neither names a code."""
    from_file = from_error_file(error_file)
    summary = from_summary(stderr_tail)
    if from_file is not None:
        rank = summary.rank if summary and summary.exit_code == from_file.exit_code else None
        return ChildFailure(from_file.exit_code, rank, from_file.message)
    return summary


def stopped_code(returncode: int, forwarded: Sequence[int]) -> int:
    """The exit code when nothing names a failing child: the launcher's own, unless it was
    asked to stop. torchrun stopped by a signal usually says so in its error file, but under
    load it has exited 1 with no word of it (seen once in CI); the container was
    then stopped by that signal, and 128 + N is the code a runtime reports for it, and the
    retryable one, not a user's permanent exit 1."""
    if returncode > 0 and forwarded:
        return 128 + forwarded[0]
    return container_code(returncode)


def write_error_file(path: str, failure: ChildFailure, launcher_code: int) -> None:
    """torchelastic's error-file format, short enough for a termination message."""
    extra = {"launcherExitCode": str(launcher_code), "timestamp": str(int(time.time()))}
    if failure.rank is not None:
        extra["rank"] = str(failure.rank)
    body = {
        "message": {
            "message": failure.message[-MESSAGE_LIMIT:],
            "errorCode": failure.exit_code,
            "extraInfo": extra,
        }
    }
    try:
        Path(path).write_text(json.dumps(body))
    except OSError as err:
        print(f"dtjob-run: cannot write {path}: {err}", file=sys.stderr)


def _pump(source: IO[bytes], tail: collections.deque[str]) -> None:
    """Copy the launcher's stderr through, keeping its last lines."""
    sink = sys.stderr.buffer
    for line in iter(source.readline, b""):
        sink.write(line)
        sink.flush()
        tail.append(line.decode(errors="replace"))


def run(command: Sequence[str]) -> int:
    """Run `command`; its exit code, or the failing child's (see the module docstring)."""
    target = os.environ.get(ERROR_FILE_ENV)
    with tempfile.TemporaryDirectory(prefix="dtjob-run-") as tmp:
        error_file = Path(tmp) / "error.json"
        env = {**os.environ, ERROR_FILE_ENV: str(error_file)}
        proc = subprocess.Popen(list(command), env=env, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        forwarded: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            forwarded.append(signum)
            proc.send_signal(signum)

        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, forward)
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        pump = threading.Thread(target=_pump, args=(proc.stderr, tail), daemon=True)
        pump.start()
        returncode = proc.wait()
        # Workers the launcher left behind (torchrun stopped by a signal at the wrong
        # moment can orphan them) hold its stderr open: its own lines are in by now, and
        # the container's end takes the orphans with it.
        pump.join(timeout=PUMP_DRAIN_SECONDS)
        if returncode == 0:
            return 0
        failure = resolve(error_file, "".join(tail))
    if failure is None:
        return stopped_code(returncode, forwarded)
    if target:
        write_error_file(target, failure, returncode)
    return failure.exit_code


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the dtjob-run console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print("usage: dtjob-run -- COMMAND [ARGS...]   (e.g. torchrun ...)", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(run(args))
    except FileNotFoundError as err:
        print(f"dtjob-run: {err}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main()
