"""Events sent off the reconcile's path, as client-go's event broadcaster sends them.

An Event is news, not state: nothing the operator decides reads one back. Sent inline, each
one was a round trip a reconcile worker waited for (two or three per admitted job, a fifth
of a burst's serial chain); queued, a worker hands it over and moves on while one sender
thread posts them in the order they came. The queue is bounded: when the API server is so
slow that it fills, new Events are dropped and counted (as client-go drops them), never
allowed to hold up a reconcile or grow the operator's memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# client-go's broadcaster buffers 1,000 events; a burst of 200 jobs makes about 800.
QUEUE_SIZE = 1000
Send = Callable[..., None]


class EventQueue:
    """Calls `send(*args)` for each `put(*args)` on one background thread, in order."""

    def __init__(self, send: Send, size: int = QUEUE_SIZE) -> None:
        self.send = send
        self.dropped = 0
        # Each item is the call to make: a send, or a flush's signal; None ends the thread.
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=size)
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def put(self, *args: Any) -> None:
        try:
            self._queue.put_nowait(lambda: self.send(*args))
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning("event queue full: %d Events dropped so far", self.dropped)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every Event put so far was sent (or failed); False on timeout."""
        done = threading.Event()
        try:
            self._queue.put(done.set, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then end the thread."""
        self.flush(timeout)
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while (call := self._queue.get()) is not None:
            try:
                call()
            except Exception as exc:  # NotLeaderError, a refused or lost connection
                log.warning("could not record an event: %s", exc)
