"""Probe-first creation of a gang's pods: one pod, then the rest at once (pure).

The first pod tests the water: a gang the API server refuses for good (Pod Security, a
missing PriorityClass, an invalid spec, a webhook that is down) or for a while (a full
quota) costs one create per attempt, not one per pod. Once it is accepted, the rest go
together (api_concurrency at a time): every pod of a gang has the same shape but for its
rank, and the gang was admitted against the quotas and the nodes' room before any pod was
created, so what refused none of the probe rarely refuses the rest; where it does (a quota
that shrank meanwhile) the pass stops and the next one probes again. Kubernetes' Job
controller doubles its batches (1, 2, 4, ...) because it admits nothing first: that cost a
gang log2(size) round trips, 7 for 64 pods and most of the time to create one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

PROBE = 1


def probe_batches(count: int, probe: int = PROBE) -> list[int]:
    """Batch sizes for creating `count` objects: the probe, then all the rest."""
    if probe < 1:
        raise ValueError(f"the probe must hold at least one object (got {probe})")
    return [n for n in (min(probe, count), count - min(probe, count)) if n > 0]


def create_in_batches(
    items: Sequence[T],
    create_batch: Callable[[Sequence[T]], list[R]],
    refused: Callable[[R], bool],
    probe: int = PROBE,
) -> list[R]:
    """Results of creating `items` batch by batch (`create_batch` returns one result per
    item); the batches after the first one with a refused result are never tried."""
    results: list[R] = []
    start = 0
    for size in probe_batches(len(items), probe):
        batch = create_batch(items[start : start + size])
        results.extend(batch)
        start += size
        if any(refused(r) for r in batch):
            break
    return results
