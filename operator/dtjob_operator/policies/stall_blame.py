"""Whom a stall points at: the rank that stopped first, its pod and node, and the call it
waits in, from what the trainer's rank 0 keeps writing while the gang hangs (progress.json's
`ranks` summary of every rank's heartbeat, docs/env-contract.md "Heartbeats"). Pure.

Rank 0's heartbeat thread keeps writing during a hang (a collective releases the GIL), so
the summary is fresh when the operator declares the stall; `behind` lists the ranks most
likely to have stopped first, that rank first. A trainer without heartbeats (a custom image
that does not call them) leaves no summary: the stall is then said without a culprit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dtjob_operator.constants import ANNOTATION_RANK


def pod_of_rank(rank: int, pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The pod holding global rank `rank`: the one with the largest first rank (its
    dtjob.io/rank annotation) not above it (a pod holds its processes' ranks in a row)."""
    best: tuple[int, Mapping[str, Any]] | None = None
    for pod in pods:
        first = _int(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RANK))
        if first is not None and first <= rank and (best is None or first > best[0]):
            best = (first, pod)
    return best[1] if best else None


def _first_behind(progress: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    ranks = (progress or {}).get("ranks")
    behind = ranks.get("behind") if isinstance(ranks, Mapping) else None
    if not isinstance(behind, list) or not behind or not isinstance(behind[0], Mapping):
        return None
    return behind[0]


def first_stopped(progress: Mapping[str, Any] | None) -> int | None:
    """The rank the heartbeat summary says stopped first; None without a summary."""
    first = _first_behind(progress)
    return _int(first.get("rank")) if first is not None else None


def blame(progress: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> str | None:
    """`rank 3 (pod j-worker-3 on node gpu-7) stopped first, at step 1200, 612s ago, waiting
    in all_reduce (...)`, or None when the trainer left no heartbeat summary."""
    first = _first_behind(progress)
    rank = first_stopped(progress)
    if first is None or rank is None:
        return None
    where = ""
    if (pod := pod_of_rank(rank, pods)) is not None:
        name = (pod.get("metadata") or {}).get("name")
        node = (pod.get("spec") or {}).get("nodeName")
        where = f" (pod {name}" + (f" on node {node})" if node else ")")
    said = f"rank {rank}{where} stopped first"
    if (step := _int(first.get("step"))) is not None and step >= 0:
        said += f", at step {step}"
    ago = first.get("lastStepAgo")
    if isinstance(ago, int | float) and not isinstance(ago, bool):
        said += f", {ago:.0f}s ago"
    waiting = first.get("waitingIn")
    if isinstance(waiting, str) and waiting:
        said += f", waiting in {waiting[:300]}"
    return said


def slowest_straggler(progress: Mapping[str, Any] | None) -> tuple[int, float] | None:
    """(rank, slowdown) of the slowest straggler in the heartbeat summary; None when no
    rank straggles."""
    ranks = (progress or {}).get("ranks")
    found = ranks.get("stragglers") if isinstance(ranks, Mapping) else None
    best: tuple[int, float] | None = None
    for s in found if isinstance(found, list) else []:
        if not isinstance(s, Mapping):
            continue
        rank, slowdown = _int(s.get("rank")), s.get("slowdown")
        if rank is None or not isinstance(slowdown, int | float) or isinstance(slowdown, bool):
            continue
        if best is None or slowdown > best[1]:
            best = (rank, float(slowdown))
    return best


def straggler_slowdown(progress: Mapping[str, Any] | None) -> float | None:
    """The slowest straggler's slowdown in the heartbeat summary (`ranks.stragglers`: CPU
    time per step over the other ranks' median); None when no rank straggles."""
    ranks = (progress or {}).get("ranks")
    found = ranks.get("stragglers") if isinstance(ranks, Mapping) else None
    slowdowns = [
        float(s["slowdown"])
        for s in (found if isinstance(found, list) else [])
        if isinstance(s, Mapping)
        and isinstance(s.get("slowdown"), int | float)
        and not isinstance(s.get("slowdown"), bool)
    ]
    return max(slowdowns) if slowdowns else None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None
