"""Restart backoff: exponential in the restart count, capped."""

from __future__ import annotations

import pytest
from unit.operator.builders import at

from dtjob_api.spec import RunPolicy
from dtjob_operator.policies.backoff import restart_delay, restart_not_before

DELAYS = [
    # (backoffSeconds, maxBackoffSeconds, restarts, delay)
    (10, 300, 0, 0),
    (10, 300, 1, 10),
    (10, 300, 2, 20),
    (10, 300, 3, 40),
    (10, 300, 5, 160),
    (10, 300, 6, 300),
    (10, 300, 1000, 300),
    (0, 300, 4, 0),
    (60, 30, 1, 30),
]


@pytest.mark.parametrize(("base", "cap", "restarts", "delay"), DELAYS)
def test_restart_delay(base: int, cap: int, restarts: int, delay: int) -> None:
    policy = RunPolicy(backoffSeconds=base, maxBackoffSeconds=cap)
    assert restart_delay(restarts, policy) == delay


def test_restart_not_before_counts_from_the_last_restart() -> None:
    policy = RunPolicy(backoffSeconds=10)
    assert restart_not_before(at(100), 2, policy) == at(120)
    assert restart_not_before(None, 2, policy) is None
    assert restart_not_before(at(100), 0, policy) is None
