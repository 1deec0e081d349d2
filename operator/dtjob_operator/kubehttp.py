"""The operator's HTTP client for the Kubernetes API: JSON in and out over one urllib3 pool.

Why not the `kubernetes` package's client: every object the operator sends is already the
API's JSON (the pure builders make it), and every answer it reads is kept as JSON (the
caches, the planner). The generated client stood between the two with pydantic models:
about 20 MiB of heap for its classes, and per call an argument check that turned a dict
body into a model and back. Here a call is a method, a path, a query and a body.

A non-2xx answer raises ApiException (its status, reason and body, as the API server's
Status object says them), so callers tell 404 and 409 apart as they did."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlencode

import urllib3

from dtjob_operator.kubeconfig import ClusterAccess

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
USER_AGENT = "dtjob-operator"

Query = Sequence[tuple[str, Any]]
Timeout = float | tuple[float, float] | None


class ApiException(Exception):
    """The API server answered, and not with success (or, status 0, not at all)."""

    def __init__(
        self,
        status: int | None = None,
        reason: str | None = None,
        body: str | None = None,
        headers: Any = None,
    ) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason: str = reason or ""
        self.body = body
        self.headers = headers

    def __str__(self) -> str:
        text = f"({self.status})\nReason: {self.reason}\n"
        return text + (f"HTTP response body: {self.body}\n" if self.body else "")

    def message(self) -> str:
        """The Status object's message, else the reason."""
        try:
            said = json.loads(self.body or "{}").get("message")
        except (ValueError, AttributeError):
            said = None
        return str(said or self.reason or self.status)


def encode_query(query: Query | None) -> str:
    """`?a=b&c=d`, with booleans as the API spells them; None values left out."""
    pairs = [(k, ("true" if v else "false") if isinstance(v, bool) else v)
             for k, v in query or () if v is not None]  # fmt: skip
    return "?" + urlencode(pairs) if pairs else ""


class HttpClient:
    """Requests to one API server over a pool of kept-alive connections. `_send` is the
    one place a request leaves (api_client.GuardedApiClient guards it)."""

    def __init__(
        self,
        access: ClusterAccess,
        *,
        pool_size: int = 64,
        retries: int | None = None,
        timeout: Timeout = None,
    ) -> None:
        self.access = access
        self.server = access.server.rstrip("/")
        self.user_agent = USER_AGENT
        self.request_timeout = timeout
        kw: dict[str, Any] = {"maxsize": pool_size, "block": False}
        if retries is not None:
            kw["retries"] = urllib3.Retry(retries, redirect=False)
        if self.server.startswith("https://"):
            kw["ssl_context"] = access.ssl_context()
            if access.insecure:
                kw["cert_reqs"] = "CERT_NONE"
                kw["assert_hostname"] = False
            if access.tls_server_name:
                kw["server_hostname"] = access.tls_server_name
        self.pool: urllib3.PoolManager = (
            urllib3.ProxyManager(access.proxy_url, **kw) if access.proxy_url
            else urllib3.PoolManager(**kw)
        )  # fmt: skip

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: Timeout = None,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """One call. The answer is read whole unless `stream` (a watch: read it, then
        release_conn). Raises ApiException on a non-2xx answer."""
        headers = {"Accept": JSON, "User-Agent": self.user_agent}
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        for attempt in (0, 1):
            if token := self.access.bearer():
                headers["Authorization"] = f"Bearer {token}"
            url = self.server + path + encode_query(query)
            resp = self._send(method, url, headers, data, timeout or self.request_timeout,
                              stream)  # fmt: skip
            if 200 <= resp.status <= 299:
                return resp
            text = resp.read().decode("utf-8", "replace") if stream else resp.data.decode(
                "utf-8", "replace")  # fmt: skip
            if stream:
                resp.release_conn()
            # A rotated token (service account, exec plugin): fetched anew, once.
            if resp.status == 401 and attempt == 0 and self._token_rotates():
                self.access.expire_token()
                continue
            raise ApiException(resp.status, resp.reason, text, resp.headers)
        raise AssertionError("unreachable")

    def data(self, method: str, path: str, body: Any = None, **kwargs: Any) -> bytes:
        """The answer's body (read whole, so its connection goes back to the pool)."""
        return bytes(self.request(method, path, body=body, **kwargs).data or b"")

    def json(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """The answer, parsed."""
        raw = self.data(method, path, body, **kwargs)
        return json.loads(raw) if raw else None

    def _token_rotates(self) -> bool:
        return self.access.token_file is not None or self.access.exec_config is not None

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout: Timeout,
        stream: bool,
    ) -> urllib3.BaseHTTPResponse:
        if isinstance(timeout, tuple):
            to: Any = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            to = urllib3.Timeout(total=timeout) if timeout is not None else urllib3.Timeout()
        return self.pool.request(
            method, url, body=body, headers=headers, timeout=to, preload_content=not stream
        )


def iter_lines(resp: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The lines of a streamed answer (a watch: one JSON event per line), each as soon as
    its chunk arrives."""
    pending = b""
    for chunk in resp.stream(amt=None, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending:
        yield pending
