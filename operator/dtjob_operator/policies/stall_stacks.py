"""The stacks of a stalled gang, kept before its restart deletes the pods and their logs
(docs/lifecycle.md, "Stalled gangs"). Pure.

Each rank whose own step stood still for DTJ_STALL_DUMP_SECONDS printed one stall line and
every thread's stack into its log (the trainer's heartbeat.py; the line's format is the
contract between the two, tests/unit/contract/test_stall_line.py). Before the restart the
operator reads the tail of a few pods' logs (the rank that stopped first comes first),
cuts each at its last stall line, and keeps the pieces in the ConfigMap `<job>-stalls`,
which `kubectl dtj why` points at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from dtjob_operator.policies.stall_blame import pod_of_rank

# The trainer's STALL_LINE_PATTERN (dtjob_trainer/heartbeat.py); the operator's image does
# not carry the trainer, so it is written twice and a contract test keeps them equal.
STALL_LINE_PATTERN = re.compile(
    r"^dtjob: rank (?P<rank>\d+) stalled at step (?P<step>-?\d+) for (?P<seconds>\d+)s; "
    r"stacks follow$",
    re.MULTILINE,
)
# How much of each pod's log is read, and kept: a few threads' stacks are a few KiB; a
# ConfigMap holds 1 MiB in all, and a handful of pods' pieces stay far below it.
LOG_TAIL_LINES = 600
MAX_PIECE_CHARS = 24_000
MAX_PODS = 8
STACKS_KEY = "stacks.txt"


def pods_to_read(
    progress: Mapping[str, Any] | None, gang: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The pods whose logs are read: the one holding the rank that stopped first (the
    heartbeat summary's first `behind`), then the others in rank order, MAX_PODS at most."""
    names = [str((p.get("metadata") or {}).get("name")) for p in gang]
    ranks = (progress or {}).get("ranks")
    behind = ranks.get("behind") if isinstance(ranks, Mapping) else None
    first_rank = behind[0].get("rank") if isinstance(behind, list) and behind and isinstance(
        behind[0], Mapping) else None  # fmt: skip
    if isinstance(first_rank, int) and not isinstance(first_rank, bool):
        culprit = pod_of_rank(first_rank, gang)
        if culprit is not None:
            first = str(culprit["metadata"]["name"])
            names = [first, *(n for n in names if n != first)]
    return names[:MAX_PODS]


def stall_piece(log: str) -> str | None:
    """The log from its last stall line on (the stacks that follow it), at most
    MAX_PIECE_CHARS (its head: the line and the main thread's stack come first); None
    when the log has no stall line (the rank was not stuck long enough, or is no trainer
    of ours)."""
    found = list(STALL_LINE_PATTERN.finditer(log))
    if not found:
        return None
    piece = log[found[-1].start() :].rstrip()
    if len(piece) > MAX_PIECE_CHARS:
        piece = piece[:MAX_PIECE_CHARS] + "\n[... cut]"
    return piece


def stacks_document(said: str, pieces: Sequence[tuple[str, str | None]]) -> str:
    """The text kept: the stall's sentence, then each read pod's piece under its name
    (`no stall line in its log` where it had none)."""
    parts = [said, ""]
    for pod, piece in pieces:
        parts.append(f"=== pod {pod}")
        parts.append(piece if piece is not None else "(no stall line in the last lines of its log)")
        parts.append("")
    return "\n".join(parts)
