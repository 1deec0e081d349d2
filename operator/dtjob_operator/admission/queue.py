"""The admission queue: priority first (higher first), then creation time (older first).

Positions count per namespace, since the quota a job waits for is its namespace's: a job's
position is how many waiting jobs of its namespace are ahead of it, plus one. Names break
ties between jobs created in the same second, so the order is total and stable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class Queued(Protocol):
    """What ordering needs of a job."""

    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def created(self) -> str: ...


Q = TypeVar("Q", bound=Queued)


@dataclass(frozen=True, order=True)
class QueueKey:
    """Sort key: (-priority, creation time, namespace, name)."""

    neg_priority: int
    created: str
    namespace: str
    name: str


def queue_key(job: Queued) -> QueueKey:
    """Where a job sorts in the queue (RFC 3339 UTC timestamps sort as strings)."""
    return QueueKey(-job.priority, job.created, job.namespace, job.name)


def in_queue_order(jobs: Iterable[Q]) -> list[Q]:
    """The jobs, first in line first (queue_key's order, as a plain tuple: a dataclass
    compares by building tuples on every comparison)."""
    return sorted(jobs, key=lambda j: (-j.priority, j.created, j.namespace, j.name))


def positions(ordered: Sequence[Queued]) -> dict[str, int]:
    """uid -> 1-based position among the waiting jobs of its namespace."""
    seen: dict[str, int] = {}
    result: dict[str, int] = {}
    for job in ordered:
        seen[job.namespace] = seen.get(job.namespace, 0) + 1
        result[job.uid] = seen[job.namespace]
    return result
