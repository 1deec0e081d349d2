"""A stand-in for the API server's ConfigMap PATCH and GET endpoints, for the progress
tests: it records each request. Subclass it per test with fresh `requests` (type("H", (ApiServer,),
{"requests": [], "status": 200})) so that tests never share what they saw."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar


class ApiServer(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    status = 200
    get_body: ClassVar[dict[str, Any]] = {}
    """What a GET answers (the ConfigMap as the API server would return it)."""

    def do_GET(self) -> None:
        self.requests.append({"path": self.path, "headers": dict(self.headers), "get": True})
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(json.dumps(self.get_body).encode())

    def do_PATCH(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append(
            {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)}
        )
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass
