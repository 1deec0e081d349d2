"""ttlSecondsAfterFinished counts from status.completionTime."""

from __future__ import annotations

from unit.operator.builders import at

from dtjob_api.spec import RunPolicy
from dtjob_operator.policies.ttl import expiry_of, ttl_expired


def test_ttl_from_completion_time() -> None:
    policy = RunPolicy(ttlSecondsAfterFinished=30)
    assert expiry_of(at(100), policy) == at(130)
    assert not ttl_expired(at(100), policy, at(129))
    assert ttl_expired(at(100), policy, at(130))


def test_zero_ttl_expires_at_completion() -> None:
    assert ttl_expired(at(5), RunPolicy(ttlSecondsAfterFinished=0), at(5))


def test_no_ttl_keeps_the_job() -> None:
    assert expiry_of(at(0), RunPolicy()) is None
    assert not ttl_expired(None, RunPolicy(ttlSecondsAfterFinished=1), at(10_000))
