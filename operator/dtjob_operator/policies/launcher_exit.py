"""The exit code behind a launcher's: which child process failed, and how.

`torchrun` exits 1 whenever a child fails, whatever the child's code (75 -> 1), and also
when it is itself stopped by SIGTERM. Classifying the container's code would make every
retryable failure of a torchrun job permanent, so the failure policy looks for the child's
code in the container's termination message, which can be, as torchrun 2.13 writes them
(captured in tests/unit/operator/fixtures/torchrun/):

- the torchelastic error file (TORCHELASTIC_ERROR_FILE = the termination message path, set by
  the env contract): JSON `{"message": {"message": "...", "errorCode": N, "extraInfo": {...}}}`.
  torchrun copies it there when a child died of an exception under `@record` (errorCode is
  the child's code), and writes its own when it was stopped by a signal
  ("SignalException: Process P got signal: 15", no errorCode) or could not reach rank 0's
  rendezvous store ("DistNetworkError: The client socket has timed out ... trying to
  connect to (host, port)": counted as 200, the contract's rendezvous timeout, retryable).
  `dtjob-run` writes the same format for every child failure, with the global rank in
  extraInfo.rank.
- the last log lines (terminationMessagePolicy FallbackToLogsOnError, when no error file was
  written: a child that called sys.exit(75) or was killed writes none): torchrun's
  ChildFailedError summary ends with a "Root Cause" block naming the rank and exitcode.

The kubelet keeps at most 4096 bytes of the message, which can cut a long error file short,
so the JSON fields are also looked for by pattern in text that is not valid JSON.
Signals are reported by torchrun as negative codes (-9); they become 128 + signal, as the
container runtime reports a killed container.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

LAUNCHER = "torchrun"

_ERROR_CODE = re.compile(r'"errorCode"\s*:\s*(-?\d+)')
_RANK = re.compile(r'"rank"\s*:\s*"?(\d+)')
_SIGNAL = re.compile(r"SignalException: Process \d+ got signal: (\d+)")
# torchrun's agent timing out on the TCPStore of rank 0's pod (static rendezvous), or the
# c10d rendezvous backends timing out.
_RENDEZVOUS = re.compile(
    r"(DistNetworkError|DistStoreError|RendezvousTimeoutError)[^\n\"]*(timed out|timeout)",
    re.IGNORECASE,
)
_LEADING_MESSAGE = re.compile(r'\{\s*"message"\s*:\s*\{\s*"message"\s*:\s*"((?:[^"\\]|\\.)*)"')
RENDEZVOUS_TIMEOUT_CODE = 200  # the env contract's code for it (docs/env-contract.md)
_ROOT_CAUSE_HEADER = "Root Cause (first observed failure):"
_FAILURES_HEADER = "Failures:"
# One child of the summary: `rank : 1 (local_rank: 1)` then `exitcode : 75 (pid: 42)`.
_SUMMARY_BLOCK = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")
PEER_LOST_CODE = 201  # the env contract: this process lost a peer mid-training


@dataclass(frozen=True)
class ChildExit:
    """The failing child of a launcher, as its termination message tells it."""

    exit_code: int
    """The child's exit code, signals as 128 + signal (SIGKILL -> 137)."""
    rank: int | None
    """Global rank of the child, when the message names it."""
    launcher_failure: str | None = None
    """What happened to the launcher itself when no child failed: "was stopped by signal
    15", "timed out reaching rank 0's rendezvous"."""
    error: str | None = None
    """The error file's message (the child's exception), without the traceback."""


def child_exit(message: str | None) -> ChildExit | None:
    """The failing child behind a launcher's exit, or None when `message` does not come
    from torchrun / dtjob-run (any other text, or a launcher error without an exit code
    such as a failed rendezvous: then the container's own code stands)."""
    if not message:
        return None
    text = message.strip()
    if text.startswith("{"):
        return _from_error_file(text)
    return _from_summary(text)


def _from_error_file(text: str) -> ChildExit | None:
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = None  # cut short by the kubelet's 4096-byte limit: look by pattern
    if isinstance(data, dict) and isinstance(data.get("message"), dict):
        body = data["message"]
        code = body.get("errorCode")
        extra = body.get("extraInfo") if isinstance(body.get("extraInfo"), dict) else {}
        rank = _int(extra.get("rank"))
        error = str(body.get("message") or "") or None
        if isinstance(code, int) and code != 0:
            return ChildExit(_container_code(code), rank, error=error)
        return _signal(error or "", error)
    if (match := _ERROR_CODE.search(text)) and int(match.group(1)) != 0:
        rank_match = _RANK.search(text)
        rank = int(rank_match.group(1)) if rank_match else None
        return ChildExit(_container_code(int(match.group(1))), rank)
    return _signal(text)


def _from_summary(text: str) -> ChildExit | None:
    failure = decisive_failure(text)
    if failure is None:
        return None
    rank, code = failure
    return ChildExit(_container_code(code), rank)


def decisive_failure(text: str) -> tuple[int | None, int] | None:
    """(rank, exit code) of the child that decides, from torchrun's failure summary: its
    root cause ("first observed"), unless that child only lost a peer (201, the contract's
    code for it) and another child failed otherwise. Children that die in the same second
    are listed in no useful order, and the peers of a child that exits die of it: a lost
    peer is a consequence, never the cause. (dtjob_trainer/dtjob_run.py picks the same.)"""
    root_at = text.find(_ROOT_CAUSE_HEADER)
    if root_at < 0:
        return None
    root = _summary_blocks(text[root_at:])[:1]
    failures_at = text.rfind(_FAILURES_HEADER, 0, root_at)
    others = _summary_blocks(text[failures_at:root_at]) if failures_at >= 0 else []
    listed = root + others
    if not listed:
        return None
    return next((f for f in listed if f[1] != PEER_LOST_CODE), listed[0])


def _summary_blocks(text: str) -> list[tuple[int | None, int]]:
    return [(int(rank) if rank else None, int(code)) for rank, code in _SUMMARY_BLOCK.findall(text)]


def _signal(message: str, error: str | None = None) -> ChildExit | None:
    """The launcher's own failure, from its error message (`error`: the whole message
    when known; else the matched words)."""
    if match := _SIGNAL.search(message):
        signal = int(match.group(1))
        why = f"was stopped by signal {signal}"
        return ChildExit(128 + signal, None, why, error or match.group(0))
    if match := _RENDEZVOUS.search(message):
        why = "timed out reaching rank 0's rendezvous"
        return ChildExit(RENDEZVOUS_TIMEOUT_CODE, None, why, error or match.group(0))
    return None


def _container_code(code: int) -> int:
    return 128 - code if code < 0 else code


def _int(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def error_file_message(message: str | None) -> str | None:
    """The error of a torchelastic error file in `message` (e.g. torchrun's own failure
    without an exit code), without its traceback; None when it is not one."""
    text = (message or "").strip()
    if not text.startswith("{"):
        return None
    try:
        data: Any = json.loads(text)
    except ValueError:
        # Cut short at 4096 bytes: the message comes first, the traceback after it.
        match = _LEADING_MESSAGE.match(text)
        if match is None:
            return None
        return str(json.loads(f'"{match.group(1)}"')) or None
    body = data.get("message") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        return None
    return str(body.get("message") or "") or None
