"""Which running jobs a higher-priority job may suspend to fit, within its namespace.

Candidates are admitted jobs of strictly lower priority. They are taken lowest priority
first and, within one priority, newest first (the least work lost), until the job fits;
then each victim is given a reprieve if the job still fits without it (highest priority
first), so no job is suspended for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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


def select_victims_in_a_domain(
    job: JobView,
    admitted: Sequence[V],
    domains: Mapping[str, frozenset[str]],
    fits_without: Callable[[Sequence[V]], bool],
) -> list[V] | None:
    """Topology-aware victims: for a gang that must sit inside one domain (`domains`: the
    domains of its level, each a set of node names), only jobs holding pods in one domain
    are candidates, domain by domain; the domain whose victims are the cheapest (the
    lowest top priority among them, then the fewest) is chosen. Room freed across several
    domains never counts: no job is preempted for room the gang could not use."""
    best: tuple[tuple[int, int], list[V]] | None = None
    for nodes in domains.values():
        pool = [j for j in admitted if any(node in nodes for node, _ in j.held)]
        chosen = select_victims(job, pool, fits_without)
        if not chosen:
            continue
        cost = (max(v.priority for v in chosen), len(chosen))
        if best is None or cost < best[0]:
            best = (cost, chosen)
    return best[1] if best is not None else None
