"""The HTTP client every API call of the operator passes through (GuardedApiClient:
timeouts, the client-side rate limit, the leader guard, reachability), how it is configured,
and what counts as an unreachable API server. k8s.KubeApi makes the calls over it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import urllib3

from dtjob_operator import kubeconfig
from dtjob_operator.kubehttp import ApiException, HttpClient, Timeout
from dtjob_operator.ratelimit import TokenBucket

# What a call that never reached the API server (or never got its answer) raises: refused
# or reset connections, TLS failures and the connect/read timeouts below.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)


def is_transport_error(exc: BaseException) -> bool:
    """True when `exc` says the API server could not be reached, not that it refused."""
    return isinstance(exc, TRANSPORT_ERRORS) or (isinstance(exc, ApiException) and exc.status == 0)


# Unreachable at least this long before an answer counts as "the API server is back".
RECOVERY_MIN_SECONDS = 1.0


class NotLeaderError(Exception):
    """A write refused locally: this replica does not hold the leader Lease (any more)."""


class GuardedApiClient(HttpClient):
    """The one place every API call of the operator passes through.

    - A connect and a read timeout on every call that sets none: a half-open connection
      would otherwise block a reconcile worker for good.
    - A client-side rate limit (`limiter`, a token bucket): every call but the leader
      Lease's waits for a token, so a burst of reconciles cannot flood the API server, and
      a Lease renewal never queues behind a gang's creates.
    - The leader guard: a replica that does not lead refuses every write locally (its own
      Lease renewals excepted), however the call got there.
    - Reachability: after calls failed because the API server was unreachable, the first
      call that gets an answer fires `on_recovered` (on a thread of its own), so the
      operator can look at every job again without waiting out its retry backoffs.
    """

    def __init__(
        self,
        access: kubeconfig.ClusterAccess,
        timeout: tuple[float, float],
        limiter: TokenBucket | None = None,
        *,
        pool_size: int = 64,
        retries: int | None = None,
    ) -> None:
        super().__init__(access, pool_size=pool_size, retries=retries, timeout=timeout)
        self.limiter = limiter
        self.may_write: Callable[[], bool] = lambda: True
        self.on_request: Callable[[str, str], None] = lambda _method, _url: None
        self.on_recovered: Callable[[float], None] = lambda _seconds: None
        self._lock = threading.Lock()
        self._unreachable_since: float | None = None

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout: Timeout,
        stream: bool,
    ) -> urllib3.BaseHTTPResponse:
        if method not in ("GET", "HEAD") and not self.may_write() and not _is_lease_url(url):
            raise NotLeaderError(f"{method} {url.split('?')[0]}: this replica does not lead")
        if self.limiter is not None and not _is_lease_url(url):
            self.limiter.acquire()
        self.on_request(method, url)
        try:
            resp = super()._send(method, url, headers, body, timeout, stream)
        except BaseException as exc:
            if is_transport_error(exc):
                with self._lock:
                    if self._unreachable_since is None:
                        self._unreachable_since = time.monotonic()
            raise
        self._reached()
        return resp

    def _reached(self) -> None:
        with self._lock:
            since, self._unreachable_since = self._unreachable_since, None
        # A call that failed while another got through is a blip, not an outage.
        if since is not None and (down := time.monotonic() - since) >= RECOVERY_MIN_SECONDS:
            threading.Thread(
                target=self.on_recovered, args=(down,), name="api-recovered", daemon=True
            ).start()


def request_kind(method: str, url: str) -> tuple[str, str]:
    """(verb, resource) of a request as the API server's metrics name them: GET of a
    collection is LIST, `watch=` makes it WATCH; the resource is the path's plural after the
    namespace (`pods`, `distributedtrainingjobs`, `pods/eviction`), "(non-resource)" else."""
    split = urlsplit(url)
    path, query = split.path, split.query
    parts = [p for p in path.split("/") if p]
    # /api/v1/... or /apis/<group>/<version>/...: what follows is the resource path.
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else []
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return method, "(non-resource)"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    if method == "GET" and "watch=" in query and query.split("watch=")[1][:1] in "tT1":
        return "WATCH", resource
    if method == "GET" and not named:
        return "LIST", resource
    return method, resource


def _is_lease_url(url: str) -> bool:
    return "/apis/coordination.k8s.io/" in url


def load_client_config(
    timeout: tuple[float, float] = (5.0, 30.0), limiter: TokenBucket | None = None
) -> GuardedApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG;
    kubeconfig.py).

    `timeout` is (connect, read) in seconds for every call that sets none; `limiter`, if
    given, paces every call (GuardedApiClient). Reconcile workers and the per-pod call
    pool share one pool of up to 64 connections."""
    return GuardedApiClient(kubeconfig.load(), timeout, limiter)
