"""An API server that answers every request with 503 (its etcd gone) for longer than kopf's
default retries (1+1+2+3+5+8+13+21 s): kopf 1.45 then escalates the error, its resource
observer fails and the whole operator exits (measured: after 56 s, exit code 1). Ours keeps
retrying. A local HTTP server plays the unhealthy API server; no cluster is needed."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[3]
SURVIVE_SECONDS = 70.0  # kopf's default retries give up after 54 s

pytestmark = [pytest.mark.integration]


class Unavailable(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": "etcd unavailable", "reason": "ServiceUnavailable",
                           "code": 503}).encode()  # fmt: skip
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def unhealthy_api_server(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig pointing at a server that answers 503 to everything."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{server.server_port}'}}}}]\n"
        "users: [{name: u, user: {token: x}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    yield kubeconfig
    server.shutdown()


def test_operator_outlives_an_api_server_that_answers_503(
    unhealthy_api_server: Path, tmp_path: Path
) -> None:
    log = tmp_path / "operator.log"
    env = {
        **os.environ,
        "KUBECONFIG": str(unhealthy_api_server),
        "PYTHONPATH": os.pathsep.join([str(TOP / "api"), str(TOP / "operator")]),
        "DTJOB_STANDALONE": "true",
        "DTJOB_METRICS_PORT": "0",
        "DTJOB_LIVENESS_ENDPOINT": "",
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dtjob_operator"], env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + SURVIVE_SECONDS
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"operator exited ({proc.returncode}); see {log}"
            time.sleep(1)
        text = log.read_text()
        assert "will retry" in text and "escalating" not in text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
