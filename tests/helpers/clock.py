"""A clock the test moves by hand, for code that takes `clock: Callable[[], float]`."""

from __future__ import annotations


class FakeClock:
    """Reads `now`; `sleep` moves it on (for code that also takes a sleep function)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
