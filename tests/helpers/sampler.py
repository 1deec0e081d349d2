"""A background thread that samples the cluster every `interval` seconds while a test runs
(`with Sub(...) as s:`), keeping API hiccups as `errors` instead of stopping."""

from __future__ import annotations

import threading
from typing import Self


class Sampler:
    interval = 0.2

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # keep sampling through API hiccups
                self.errors.append(repr(exc))
            self._stop.wait(self.interval)
