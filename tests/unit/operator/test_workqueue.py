"""The work queue hands a key to one worker at a time and collapses bursts."""

import threading

from dtjob_operator.workqueue import WorkQueue
from helpers.clock import FakeClock


def test_duplicate_adds_collapse_into_one_item() -> None:
    q = WorkQueue()
    for _ in range(5):
        q.add("a")
    q.add("b")
    assert q.get(timeout=0) == "a"
    assert q.get(timeout=0) == "b"
    assert q.get(timeout=0) is None


def test_key_added_while_processing_is_handed_out_again_only_after_done() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")
    assert q.get(timeout=0) is None  # not handed to a second worker concurrently
    q.done("a")
    assert q.get(timeout=0) == "a"
    q.done("a")
    assert q.get(timeout=0) is None


def test_add_after_waits_for_the_clock() -> None:
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("a", 10)
    assert q.get(timeout=0) is None
    clock.now = 9.9
    assert q.get(timeout=0) is None
    clock.now = 10.0
    assert q.get(timeout=0) == "a"


def test_earlier_add_after_supersedes_later_one_and_later_one_is_ignored() -> None:
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("a", 30)
    q.add_after("a", 5)
    q.add_after("a", 60)
    assert len(q) == 2  # the 60 s request was dropped: 5 s is sooner
    clock.now = 5
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.now = 100
    assert q.get(timeout=0) is None  # the superseded 30 s entry does not fire again


def test_shutdown_wakes_blocked_getters() -> None:
    q = WorkQueue()
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    q.shutdown()
    t.join(timeout=5)
    assert not t.is_alive()
    assert got == [None]


def test_blocking_get_returns_delayed_key_when_due() -> None:
    q = WorkQueue()
    q.add_after("a", 0.05)
    assert q.get(timeout=2) == "a"
