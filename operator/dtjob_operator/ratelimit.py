"""A token bucket for the operator's API client, as client-go's flowcontrol rate limiter.

`qps` tokens are added per second up to `burst`; each request takes one, waiting for it when
the bucket is empty. Requests are not refused, only spread out: a burst of reconciles (an
operator restart, a large gang) reaches the API server at `qps` on average instead of all at
once. The clock and the sleep are injected so the arithmetic is tested without waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """Thread-safe token bucket; `acquire()` blocks until the caller may send."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"qps must be > 0 and burst >= 1 (got {qps}, {burst})")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token now (the balance may go negative) and return how long the caller
        must wait before using it. Reserving under the lock and sleeping outside it keeps
        callers in order without holding the lock while they wait."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self) -> float:
        """Wait for a token; returns the seconds waited."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        return wait
