"""A rate-limited work queue of job keys, in the manner of client-go's workqueue.

Watch events only *enqueue* a job's key; a few worker threads take keys off the queue and
reconcile them. This gives the two properties the lifecycle needs: one job is never
reconciled by two threads at once (a key being processed is not handed out again; a key
added meanwhile is marked dirty and handed out once the first pass is done), and a burst of
pod events for one job collapses into one reconcile. `add_after` schedules time-based
transitions (restart backoff, deadlines, TTL, progress resync).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Hashable


class WorkQueue:
    """Deduplicating FIFO of keys with delayed adds; safe to use from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: list[Hashable] = []
        self._queued: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._delayed: list[tuple[float, int, Hashable]] = []
        # Earliest pending due time per key: a later add_after of a key that is already
        # due sooner changes nothing, so the heap holds at most one live entry per key.
        self._due: dict[Hashable, float] = {}
        self._seq = 0
        self._shutdown = False

    def add(self, key: Hashable) -> None:
        """Enqueue key now, unless it is already waiting."""
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        """Enqueue key after `delay` seconds (at once when delay <= 0)."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            due = self._clock() + delay
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            self._seq += 1
            heapq.heappush(self._delayed, (due, self._seq, key))
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> Hashable | None:
        """Take the next key, blocking up to `timeout`; None on timeout or shutdown.

        The caller must call `done(key)` when it has finished with the key.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                self._promote_due_locked()
                if self._queue:
                    key = self._queue.pop(0)
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                now = self._clock()
                if deadline is not None and now >= deadline:
                    return None
                waits = [t - now for t in (self._next_due_locked(), deadline) if t is not None]
                self._cond.wait(max(0.0, min(waits)) if waits else None)

    def done(self, key: Hashable) -> None:
        """Mark key finished; if it was added while processing, it is queued again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add_locked(key)

    def shutdown(self) -> None:
        """Wake every waiting `get` and make further ones return None."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._delayed)

    def _add_locked(self, key: Hashable) -> None:
        if key in self._processing:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)
            self._cond.notify()

    def _promote_due_locked(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key = heapq.heappop(self._delayed)
            if self._due.get(key) == due:  # else superseded by an earlier add_after
                del self._due[key]
                self._add_locked(key)

    def _next_due_locked(self) -> float | None:
        return self._delayed[0][0] if self._delayed else None
