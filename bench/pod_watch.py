"""Pods of one namespace as the benchmark sees them: one list, then one watch.

The burst's first measure listed the namespace's 1,600 pods once a second (and the 64-pod
part 20 times a second): each list made the API server encode every pod again (about
5 MB a time), which on a 2-core machine took CPU from the very control plane whose speed
was measured (the API server spent a third of the burst's CPU on it). A watch costs it one
encoding per change, shared by every watcher, and marks each moment to the event rather
than to the next poll.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client


def lines(resp: Any) -> Iterator[bytes]:
    """The watch's events, a JSON object a line, as the API server streams them."""
    pending = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        pending += chunk
        *done, pending = pending.split(b"\n")
        yield from (line for line in done if line)
    if pending:
        yield pending


Listing = Callable[..., Any]
"""list_namespaced_<kind>(namespace, label_selector=..., **query): a list, or with
watch=True a stream of events (unread: _preload_content=False)."""


def pod_phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


class PodWatch:
    """Phase of every live pod (not deleted, not terminating) of `ns` that matches
    `selector`, kept current by a background watch; `wait` returns when a predicate over
    them holds. Started as a context manager; the watch ends with it.

    `listing` and `state` watch another kind the same way (the burst's jobs, for when each
    has started): `phases` then holds state(obj) of each."""

    def __init__(
        self, core: client.CoreV1Api, ns: str, selector: str = "", *,
        listing: Listing | None = None, state: Callable[[dict[str, Any]], str] = pod_phase,
    ) -> None:  # fmt: skip
        self.core, self.ns, self.selector = core, ns, selector
        self.listing: Listing = listing or core.list_namespaced_pod
        self.state = state
        self.phases: dict[str, str] = {}
        self.changed = threading.Condition()
        self.error: BaseException | None = None
        self.resp: Any = None
        self.stopping = False
        self.thread = threading.Thread(target=self.run, name=f"watch-{ns}", daemon=True)
        # Called with the watch after every change, under its lock: marks taken there are
        # the event's own moment, not the next poll's.
        self.on_change: Callable[[PodWatch], None] = lambda _: None

    def __enter__(self) -> PodWatch:
        listed = json.loads(
            self.listing(self.ns, label_selector=self.selector, _preload_content=False).data
        )
        with self.changed:
            for pod in listed["items"]:
                self.apply("ADDED", pod)
        self.version = listed["metadata"]["resourceVersion"]
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping = True
        if self.resp is not None:
            self.resp.close()  # unblocks the reader
        self.thread.join(timeout=5)

    def apply(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
            self.phases.pop(name, None)
        else:
            self.phases[name] = self.state(pod)

    def run(self) -> None:
        try:
            while not self.stopping:
                self.resp = self.listing(
                    self.ns, label_selector=self.selector, watch=True,
                    resource_version=self.version, allow_watch_bookmarks=True,
                    timeout_seconds=1800, _preload_content=False,
                )  # fmt: skip
                for line in lines(self.resp):
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"watch of {self.ns} failed: {obj}")
                    self.version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        with self.changed:
                            self.apply(event["type"], obj)
                            self.on_change(self)
                            self.changed.notify_all()
        except BaseException as exc:  # handed to the waiter
            if not self.stopping:
                self.error = exc
                with self.changed:
                    self.changed.notify_all()

    def count(self, phase: str | None = None) -> int:
        if phase is None:
            return len(self.phases)
        return sum(1 for p in self.phases.values() if p == phase)

    def wait(self, check: Callable[[PodWatch], bool], timeout: float, what: str) -> float:
        """Block until check(self) holds; returns time.monotonic() of that moment."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not check(self):
                if self.error is not None:
                    raise RuntimeError(f"waiting for {what}") from self.error
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{what} not seen after {timeout:.0f} s: {len(self.phases)} objects, "
                        f"{dict(Counter(self.phases.values()))}"
                    )
                self.changed.wait(timeout=min(left, 1.0))
            return time.monotonic()
