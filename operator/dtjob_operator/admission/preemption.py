"""Which running jobs a higher-priority job may suspend to fit, within its namespace.

Candidates are admitted jobs of strictly lower priority. They are taken lowest priority
first and, within one priority, newest first (the least work lost), until the job fits;
then each victim is given a reprieve if the job still fits without it (highest priority
first), so no job is suspended for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from dtjob_operator.admission.snapshot import JobView

V = TypeVar("V", bound=JobView)


def victim_order(pool: Sequence[V]) -> list[V]:
    """Lowest priority first, then the most recently created first."""
    by_age = sorted(pool, key=lambda j: (j.created, j.name), reverse=True)
    return sorted(by_age, key=lambda j: j.priority)


def select_victims(
    job: JobView, admitted: Sequence[V], fits_without: Callable[[Sequence[V]], bool]
) -> list[V] | None:
    """The fewest lower-priority admitted jobs of the same namespace whose removal makes
    `fits_without(victims)` true; None when even all of them are not enough."""
    pool = [j for j in admitted if j.namespace == job.namespace and j.priority < job.priority]
    chosen: list[V] = []
    for candidate in victim_order(pool):
        chosen.append(candidate)
        if fits_without(chosen):
            break
    else:
        return None
    for candidate in sorted(chosen, key=lambda j: -j.priority):
        rest = [j for j in chosen if j is not candidate]
        if rest and fits_without(rest):
            chosen = rest
    return chosen
