"""Leader election: the Lease of another replica is judged by our own monotonic clock only,
so no clock skew between machines makes two replicas lead at once."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from dtjob_operator.leader import LeaderElector, LeaseObserver
from helpers.clock import FakeClock

LEASE = 15.0


class LeaseStore:
    """The few Lease calls the elector makes, against one in-memory Lease with
    resourceVersion checks (the API server's optimistic concurrency)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.lease)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> bool:
        if self.lease is not None:
            return False
        self._store(body)
        return True

    def replace_lease(self, namespace: str, body: dict[str, Any]) -> bool:
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            return False
        self._store(body)
        return True

    def _store(self, body: dict[str, Any]) -> None:
        self.rv += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)


def elector(store: LeaseStore, name: str, clock: FakeClock, wall: datetime) -> LeaderElector:
    return LeaderElector(
        store,  # type: ignore[arg-type]
        "ops",
        "dtjob-operator",
        name,
        LEASE,
        clock=clock,
        wall_clock=lambda: wall,
    )


def test_observer_restarts_its_timer_only_when_the_record_changes() -> None:
    clock = FakeClock(1000.0)
    seen = LeaseObserver(clock)
    assert not seen.expired(LEASE)  # nothing seen yet: never expired
    seen.observe({"holderIdentity": "a", "renewTime": "t1"})
    clock.now += LEASE - 1
    seen.observe({"holderIdentity": "a", "renewTime": "t1"})
    assert not seen.expired(LEASE)
    clock.now += 1
    assert seen.expired(LEASE)
    seen.observe({"holderIdentity": "a", "renewTime": "t2"})
    assert not seen.expired(LEASE)


def test_a_renewing_leader_whose_clock_is_an_hour_behind_keeps_the_lease() -> None:
    store, clock = LeaseStore(), FakeClock(1000.0)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    a = elector(store, "a", clock, now - timedelta(hours=1))  # renewTime an hour "old"
    b = elector(store, "b", clock, now)
    assert a.round()
    for i in range(20):
        clock.now += LEASE / 3
        wall = now - timedelta(hours=1) + timedelta(seconds=(i + 1) * LEASE / 3)
        a.wall_clock = lambda wall=wall: wall
        assert a.round()
        assert not b.round() and not b.is_leader()
    assert a.is_leader()


def test_a_silent_leader_whose_clock_is_an_hour_ahead_is_replaced_after_one_duration() -> None:
    store, clock = LeaseStore(), FakeClock(1000.0)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    a = elector(store, "a", clock, now + timedelta(hours=1))  # renewTime in "the future"
    b = elector(store, "b", clock, now)
    assert a.round()
    assert not b.round()  # b starts its own timer on what it sees
    clock.now += LEASE - 0.1
    assert not b.round()
    assert not a.is_leader()  # a stopped acting long before (2/3 of the duration)
    clock.now += 0.2
    assert b.round() and b.is_leader()
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "b"
    assert store.lease["spec"]["leaseTransitions"] == 1


def test_the_leader_stops_acting_before_anyone_may_take_over() -> None:
    store, clock = LeaseStore(), FakeClock(1000.0)
    a = elector(store, "a", clock, datetime(2026, 1, 1, tzinfo=UTC))
    stopped: list[str] = []
    a.on_stopped_leading = lambda: stopped.append("a")
    assert a.round() and a.is_leader()
    clock.now += LEASE * 2 / 3
    assert not a.is_leader()  # before any other replica's timer (a whole duration) ends
    store.lease = None  # the renewal fails from now on
    store.create_lease = lambda namespace, body: False  # type: ignore[method-assign]
    assert not a.round()
    assert stopped == ["a"]


def test_a_replica_that_lost_a_renewal_race_does_not_lead() -> None:
    store, clock = LeaseStore(), FakeClock(1000.0)
    a = elector(store, "a", clock, datetime(2026, 1, 1, tzinfo=UTC))
    assert a.round()
    original = store.replace_lease

    def conflict(namespace: str, body: dict[str, Any]) -> bool:
        store.rv += 1  # someone else wrote the Lease in between
        assert store.lease is not None
        store.lease["metadata"]["resourceVersion"] = str(store.rv)
        return original(namespace, body)

    store.replace_lease = conflict  # type: ignore[method-assign]
    clock.now += LEASE * 2 / 3 + 1
    assert not a.round() and not a.is_leader()
