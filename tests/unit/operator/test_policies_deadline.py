"""activeDeadlineSeconds counts from status.startTime."""

from __future__ import annotations

from unit.operator.builders import at

from dtjob_api.spec import RunPolicy
from dtjob_operator.policies.deadline import deadline_exceeded, deadline_of


def test_deadline_from_start_time() -> None:
    policy = RunPolicy(activeDeadlineSeconds=60)
    assert deadline_of(at(10), policy) == at(70)
    assert not deadline_exceeded(at(10), policy, at(69))
    assert deadline_exceeded(at(10), policy, at(70))


def test_no_deadline_without_setting_or_before_start() -> None:
    assert deadline_of(at(0), RunPolicy()) is None
    assert not deadline_exceeded(None, RunPolicy(activeDeadlineSeconds=1), at(10_000))
