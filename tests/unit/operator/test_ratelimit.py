"""The API client's token bucket (ratelimit.py): a burst goes out at once, then `qps`."""

from __future__ import annotations

import threading

import pytest

from dtjob_operator.ratelimit import TokenBucket
from helpers.clock import FakeClock


def test_a_burst_goes_out_at_once_then_requests_are_spaced_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=5, clock=clock, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(5)]
    assert waits == [0.0] * 5 and clock.now == 0.0
    for _ in range(10):
        bucket.acquire()
    # 15 requests: the 5 of the burst free, the other 10 at 10 per second.
    assert clock.now == pytest.approx(1.0)


def test_idle_time_refills_the_bucket_up_to_burst_only() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=3, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        bucket.acquire()
    clock.now += 100  # a long quiet spell earns 3 tokens, not 200
    assert [bucket.acquire() for _ in range(3)] == [0.0] * 3
    assert bucket.acquire() == pytest.approx(0.5)


def test_waiting_callers_are_served_in_turn() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=4, burst=1, clock=clock)
    assert bucket.reserve() == 0.0
    # Two callers reserving at the same instant wait one and two token intervals.
    assert bucket.reserve() == pytest.approx(0.25)
    assert bucket.reserve() == pytest.approx(0.5)


def test_the_bucket_is_shared_safely_by_threads() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=100, burst=10, clock=clock)
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(50):
            w = bucket.reserve()
            with lock:
                waits.append(w)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 200 reservations at one instant: 10 free, then one every 10 ms, none lost or doubled.
    assert sorted(waits)[-1] == pytest.approx(1.9)
    assert sum(1 for w in waits if w == 0) == 10


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps=0, burst=1)
    with pytest.raises(ValueError):
        TokenBucket(qps=1, burst=0)
