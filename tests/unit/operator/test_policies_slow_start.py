"""Slow-start pod creation (policies/slow_start.py): 1, 2, 4, ... and stop at a refusal."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dtjob_operator.policies.slow_start import create_in_batches, slow_start_batches


@pytest.mark.parametrize(
    ("count", "sizes"),
    [
        (0, []),
        (1, [1]),
        (2, [1, 1]),
        (3, [1, 2]),
        (4, [1, 2, 1]),
        (16, [1, 2, 4, 8, 1]),
        (64, [1, 2, 4, 8, 16, 32, 1]),
        (63, [1, 2, 4, 8, 16, 32]),
    ],
)
def test_batches_double_from_one_and_sum_to_the_gang(count: int, sizes: list[int]) -> None:
    assert slow_start_batches(count) == sizes
    assert sum(sizes) == count


def test_a_larger_first_batch_doubles_from_there() -> None:
    assert slow_start_batches(10, initial=3) == [3, 6, 1]
    with pytest.raises(ValueError):
        slow_start_batches(4, initial=0)


class Creator:
    """Records the batches it is asked for; refuses the names it is told to."""

    def __init__(self, refuse: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.refuse = refuse
        self.batches: list[list[int]] = []

    def __call__(self, batch: Sequence[int]) -> list[tuple[int, bool]]:
        self.batches.append(list(batch))
        return [(i, i in self.refuse) for i in batch]


def test_a_gang_that_is_accepted_is_created_whole_in_log2_rounds() -> None:
    create = Creator()
    results = create_in_batches(list(range(16)), create, refused=lambda r: r[1])
    assert [i for i, _ in results] == list(range(16))
    assert create.batches == [[0], [1, 2], [3, 4, 5, 6], list(range(7, 15)), [15]]


def test_a_refused_first_pod_stops_the_gang_after_one_create() -> None:
    create = Creator(refuse=set(range(16)))
    results = create_in_batches(list(range(16)), create, refused=lambda r: r[1])
    assert create.batches == [[0]]
    assert results == [(0, True)]


def test_a_refusal_mid_gang_finishes_its_batch_and_tries_no_further_one() -> None:
    create = Creator(refuse={4})  # e.g. the quota runs out at the fifth pod
    results = create_in_batches(list(range(16)), create, refused=lambda r: r[1])
    assert create.batches == [[0], [1, 2], [3, 4, 5, 6]]
    assert [r for r in results if r[1]] == [(4, True)]
    assert len(results) == 7
