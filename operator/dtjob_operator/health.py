"""Liveness: the operator is alive when its reconcile workers move and its watches run.

A process can look alive (an HTTP endpoint that answers) while the work is stuck: a worker
blocked for good in a call, or kopf's event loop wedged. Each worker reports when it takes
and finishes a job; kopf's loop beats every few seconds. /healthz answers 503, and the
kubelet restarts the pod, when a reconcile has been in flight longer than the limit or the
loop has been silent too long. Idle workers are fine: waiting for work is not being stuck.

Readiness (/readyz on the same server) is the other question: has this replica started?
It is ready once its reconcile workers run and kopf's loop has beaten (the beat starts in a
kopf startup handler, and kopf opens its watches as soon as its startup handlers are done),
and stays ready while the loop beats. Leadership plays no part: a replica that does not
lead is healthy, watches like the leader, and takes the Lease over when the leader goes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

READINESS_PATH = "/readyz"


@dataclass(frozen=True)
class Verdict:
    alive: bool
    reason: str


class Heartbeats:
    """In-flight reconciles (per worker thread) and the watch loop's last beat."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._in_flight: dict[int, tuple[float, str]] = {}
        self._loop_beat = clock()
        self._loop_started = False
        self._workers_running = False

    def workers_started(self) -> None:
        """The reconcile workers run (readiness)."""
        with self._lock:
            self._workers_running = True

    def workers_stopped(self) -> None:
        """The reconcile workers were stopped (the operator is shutting down)."""
        with self._lock:
            self._workers_running = False

    def started(self, what: str) -> None:
        """The calling worker took `what` (a job key) and works on it from now."""
        with self._lock:
            self._in_flight[threading.get_ident()] = (self.clock(), what)

    def finished(self) -> None:
        """The calling worker is done with its item."""
        with self._lock:
            self._in_flight.pop(threading.get_ident(), None)

    def loop_beat(self) -> None:
        """kopf's event loop is running."""
        with self._lock:
            self._loop_beat = self.clock()
            self._loop_started = True

    def verdict(self, stuck_after: float, loop_silent_after: float) -> Verdict:
        """Alive unless a reconcile has run longer than `stuck_after` seconds or the loop
        has not beaten for `loop_silent_after` seconds."""
        now = self.clock()
        with self._lock:
            oldest = min(self._in_flight.values(), default=None)
            silent = now - self._loop_beat
        if oldest is not None and now - oldest[0] > stuck_after:
            return Verdict(False, f"reconcile of {oldest[1]} in flight for {now - oldest[0]:.0f}s")
        if silent > loop_silent_after:
            return Verdict(False, f"watch loop silent for {silent:.0f}s")
        return Verdict(True, "ok")

    def readiness(self, loop_silent_after: float) -> Verdict:
        """Ready (`alive` true) once the workers run and kopf's loop has beaten, while it
        has beaten within `loop_silent_after` seconds. Whether this replica leads does not
        matter."""
        now = self.clock()
        with self._lock:
            workers = self._workers_running
            loop_started = self._loop_started
            silent = now - self._loop_beat
        if not workers:
            return Verdict(False, "reconcile workers not running")
        if not loop_started:
            return Verdict(False, "kopf's watches not started yet")
        if silent > loop_silent_after:
            return Verdict(False, f"watch loop silent for {silent:.0f}s")
        return Verdict(True, "ok")


def serve_liveness(
    endpoint: str, check: Callable[[], Verdict], ready: Callable[[], Verdict] | None = None
) -> ThreadingHTTPServer:
    """Answer GET on `endpoint`'s path (e.g. http://0.0.0.0:8080/healthz): 200 when
    `check()` says alive, else 503; the body says why. With `ready`, the same on
    READINESS_PATH of the same server for readiness. Runs on a thread of its own."""
    parts = urllib.parse.urlsplit(endpoint)
    routes = {parts.path or "/": ("alive", check)}
    if ready is not None:
        routes[READINESS_PATH] = ("ready", ready)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?")[0])
            if route is None:
                self.send_error(404)
                return
            key, probe = route
            verdict = probe()
            body = json.dumps({key: verdict.alive, "reason": verdict.reason}).encode()
            self.send_response(200 if verdict.alive else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds is not news

    port = 8080 if parts.port is None else parts.port  # 0: any free port (tests)
    server = ThreadingHTTPServer((parts.hostname or "0.0.0.0", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="liveness", daemon=True).start()
    return server
