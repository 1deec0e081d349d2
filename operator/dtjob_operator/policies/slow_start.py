"""Slow-start creation of a gang's pods, as the batch Job controller creates its pods.

Pods are created in batches of 1, 2, 4, ... (each batch concurrently, the last one cut to
what is left), and creation stops after the first batch with a refusal. A gang the API
server accepts is all created in about log2(size) round trips; a gang it refuses (a full
quota, a Pod Security violation, a webhook that is down) costs one create, not one per pod,
on every retry. The refusal itself is classified as before (policies/create_errors.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# kube-controller-manager's SlowStartInitialBatchSize: the first create tests the water.
INITIAL_BATCH = 1


def slow_start_batches(count: int, initial: int = INITIAL_BATCH) -> list[int]:
    """Batch sizes for creating `count` objects: initial, then doubling, summing to count."""
    if initial < 1:
        raise ValueError(f"the first batch must hold at least one object (got {initial})")
    sizes: list[int] = []
    size, left = initial, count
    while left > 0:
        sizes.append(min(size, left))
        left -= sizes[-1]
        size *= 2
    return sizes


def create_in_batches(
    items: Sequence[T],
    create_batch: Callable[[Sequence[T]], list[R]],
    refused: Callable[[R], bool],
    initial: int = INITIAL_BATCH,
) -> list[R]:
    """Results of creating `items` batch by batch (`create_batch` returns one result per
    item); the batches after the first one with a refused result are never tried."""
    results: list[R] = []
    start = 0
    for size in slow_start_batches(len(items), initial):
        batch = create_batch(items[start : start + size])
        results.extend(batch)
        start += size
        if any(refused(r) for r in batch):
            break
    return results
