"""Paginated lists (k8s.list_pages) and the client's rate limit, against a tiny local HTTP
server that plays the API server's limit/continue protocol."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from dtjob_operator.api_client import GuardedApiClient
from dtjob_operator.k8s import KubeApi
from dtjob_operator.kubeconfig import ClusterAccess


class PagingServer(ThreadingHTTPServer):
    """Serves `items` names as nodes (and pods) `limit` at a time; records every query.
    `expire_after` makes the continue token of that page answer 410 Expired once."""

    def __init__(self, items: int) -> None:
        super().__init__(("127.0.0.1", 0), PagingHandler)
        self.names = [f"n-{i:03d}" for i in range(items)]
        self.queries: list[dict[str, list[str]]] = []
        self.expire_token: str | None = None


class PagingHandler(BaseHTTPRequestHandler):
    server: PagingServer

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)
        self.server.queries.append(query)
        token = query.get("continue", [None])[0]
        if token is not None and token == self.server.expire_token:
            self.server.expire_token = None
            self.reply(410, {"kind": "Status", "code": 410, "reason": "Expired"})
            return
        start = int(token) if token else 0
        limit = int(query["limit"][0]) if "limit" in query else len(self.server.names)
        names = self.server.names[start : start + limit]
        more = start + limit < len(self.server.names)
        meta = {"continue": str(start + limit)} if more else {}
        self.reply(200, {"metadata": meta, "items": [{"metadata": {"name": n}} for n in names]})

    def reply(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[PagingServer]:
    srv = PagingServer(items=12)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def api_for(srv: PagingServer, limiter: object = None) -> GuardedApiClient:
    access = ClusterAccess(server=f"http://127.0.0.1:{srv.server_address[1]}")
    return GuardedApiClient(access, (1.0, 2.0), limiter, retries=0)  # type: ignore[arg-type]


def names(items: list[dict[str, object]]) -> list[str]:
    return [item["metadata"]["name"] for item in items]  # type: ignore[index]


def test_a_list_is_read_page_by_page_until_no_continue_token(server: PagingServer) -> None:
    api = KubeApi(api_for(server), page_size=5)
    assert names(api.list_nodes()) == server.names
    assert [q.get("limit") for q in server.queries] == [["5"]] * 3
    assert [q.get("continue") for q in server.queries] == [None, ["5"], ["10"]]


def test_every_cluster_wide_list_of_the_admission_pass_is_paginated(server: PagingServer) -> None:
    api = KubeApi(api_for(server), page_size=4)
    for listing in (api.list_all_pods, api.list_nodes, api.list_resource_quotas,
                    api.list_priority_classes, api.list_jobs):  # fmt: skip
        server.queries.clear()
        assert len(listing()) == 12
        assert len(server.queries) == 3 and all(q["limit"] == ["4"] for q in server.queries)
    server.queries.clear()
    assert len(api.list_pods("ns", "job")) == 12 and len(server.queries) == 3
    server.queries.clear()
    assert len(api.list_jobs(["a", "b"])) == 24 and len(server.queries) == 6


def test_an_expired_continue_token_restarts_the_list_in_one_piece(server: PagingServer) -> None:
    server.expire_token = "5"
    api = KubeApi(api_for(server), page_size=5)
    # The first page is dropped (it may be of an older revision), not served twice.
    assert names(api.list_nodes()) == server.names
    assert "limit" not in server.queries[-1]


class CountingLimiter:
    def __init__(self) -> None:
        self.calls = 0

    def acquire(self) -> float:
        self.calls += 1
        return 0.0


def test_every_call_but_the_leader_lease_waits_for_the_rate_limit(server: PagingServer) -> None:
    limiter = CountingLimiter()
    api = KubeApi(api_for(server, limiter), page_size=5)
    api.list_nodes()
    assert limiter.calls == 3  # one token a page
    api.get_lease("ns", "lease")
    assert limiter.calls == 3
