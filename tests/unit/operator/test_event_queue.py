"""Events off the reconcile's path (event_queue.py): sent in order on a thread of their own,
a failure logged and the next one sent, a full queue drops (and counts) rather than blocks."""

from __future__ import annotations

import threading
import time

from dtjob_operator.event_queue import EventQueue


def test_events_are_sent_in_order_and_a_failure_does_not_stop_the_rest() -> None:
    sent: list[int] = []

    def send(n: int) -> None:
        if n == 3:
            raise RuntimeError("the API server refused it")
        sent.append(n)

    events = EventQueue(send)
    for n in range(6):
        events.put(n)
    assert events.flush()
    assert sent == [0, 1, 2, 4, 5]
    events.stop()


def test_put_never_waits_for_the_api_server() -> None:
    release, busy = threading.Event(), threading.Event()
    events = EventQueue(lambda n: (busy.set(), release.wait()), size=4)
    events.put(0)
    assert busy.wait(5)  # the first one is in flight: the API server hangs
    started = time.monotonic()
    for n in range(1, 10):  # four queued, the rest dropped
        events.put(n)
    assert time.monotonic() - started < 1.0
    assert events.dropped == 5
    release.set()
    assert events.flush()
    events.stop()


def test_stop_sends_what_is_queued_first() -> None:
    sent: list[int] = []
    events = EventQueue(lambda n: (time.sleep(0.01), sent.append(n)))
    for n in range(5):
        events.put(n)
    events.stop()
    assert sent == list(range(5))
