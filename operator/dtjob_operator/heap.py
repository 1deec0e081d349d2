"""Handing freed heap back to the system (glibc's malloc_trim), once the operator is idle.

After a burst (thousands of pods listed and watched, their JSON decoded), Python frees
the objects but glibc keeps the freed pages of its heap for reuse: the operator's resident
memory stayed at its high-water mark for good, 50 MiB above a fresh start. malloc_trim(0)
returns the free pages to the system; it costs a few milliseconds and takes nothing in use.
Elsewhere than glibc (musl, macOS) there is no such call and nothing is done."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrimmer:
    """Trims the heap at most every `interval` seconds, when asked (an idle moment)."""

    def __init__(self, interval: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._trim = _malloc_trim()
        self._interval = interval
        self._clock = clock
        self._last = clock()  # not at start-up: the start is no high-water mark
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def idle(self) -> None:
        """The operator has nothing to do now: trim if the last trim is old enough."""
        now = self._clock()
        if self._trim is None or now - self._last < self._interval:
            return
        self._last = now
        self._trim(0)
        self.trims += 1
