"""Probe-first pod creation (policies/probe_first.py): one pod, then the rest; stop at a
refusal."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dtjob_operator.policies.probe_first import create_in_batches, probe_batches


@pytest.mark.parametrize(
    ("count", "sizes"),
    [(0, []), (1, [1]), (2, [1, 1]), (8, [1, 7]), (64, [1, 63])],
)
def test_one_probe_then_the_rest_of_the_gang(count: int, sizes: list[int]) -> None:
    assert probe_batches(count) == sizes
    assert sum(sizes) == count


def test_a_larger_probe() -> None:
    assert probe_batches(10, probe=3) == [3, 7]
    assert probe_batches(2, probe=3) == [2]
    with pytest.raises(ValueError):
        probe_batches(4, probe=0)


class Creator:
    """Records the batches it is asked for; refuses the names it is told to."""

    def __init__(self, refuse: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.refuse = refuse
        self.batches: list[list[int]] = []

    def __call__(self, batch: Sequence[int]) -> list[tuple[int, bool]]:
        self.batches.append(list(batch))
        return [(i, i in self.refuse) for i in batch]


def test_a_gang_that_is_accepted_is_created_whole_in_two_rounds() -> None:
    create = Creator()
    results = create_in_batches(list(range(16)), create, refused=lambda r: r[1])
    assert [i for i, _ in results] == list(range(16))
    assert create.batches == [[0], list(range(1, 16))]


def test_a_refused_first_pod_stops_the_gang_after_one_create() -> None:
    create = Creator(refuse=set(range(16)))
    results = create_in_batches(list(range(16)), create, refused=lambda r: r[1])
    assert create.batches == [[0]]
    assert results == [(0, True)]


def test_a_refusal_after_the_probe_finishes_its_batch() -> None:
    create = Creator(refuse={4, 9})  # e.g. a quota that shrank after the admission
    results = create_in_batches(list(range(16)), create, refused=lambda r: r[1])
    assert len(create.batches) == 2
    assert [r for r in results if r[1]] == [(4, True), (9, True)]
    assert len(results) == 16
