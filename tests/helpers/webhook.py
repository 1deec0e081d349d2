"""A validating admission webhook on the host that holds pod creates until released: the
API server waits for it (up to the webhook's timeoutSeconds), so whoever creates a pod in
the namespace it watches is really blocked in a real API call, as behind a slow webhook.

The local control plane runs on the host, so it reaches https://127.0.0.1:<port>; the
certificate is self-signed for that address (the openssl CLI, as hack/cluster_pki.py).
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from helpers.kube import unique, wait_for

# The API server answers the create with an error once this has passed; tests release
# the hold well before.
TIMEOUT_SECONDS = 30


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, valid for a day."""
    cert, key = directory / "webhook.crt", directory / "webhook.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=dtjob-test-webhook", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class HoldingWebhook:
    """Allows every pod create, but holds each one (dry runs excepted) until `release()`.
    `held` records when each held create arrived (time.monotonic())."""

    def __init__(self, api: client.ApiClient, namespace: str, directory: Path) -> None:
        self.api, self.namespace = api, namespace
        self.cert, key = self_signed_cert(directory)
        self.released = threading.Event()
        self.held: list[float] = []
        self.dry_runs = 0
        self.name = unique("dtjob-test-hold")
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                if request.get("dryRun"):
                    hook.dry_runs += 1
                else:
                    hook.held.append(time.monotonic())
                    hook.released.wait(TIMEOUT_SECONDS)
                answer = {**review, "response": {"uid": request["uid"], "allowed": True}}
                body = json.dumps({k: v for k, v in answer.items() if k != "request"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler

    def __enter__(self) -> HoldingWebhook:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        port = self.server.server_address[1]
        ca = base64.b64encode(self.cert.read_bytes()).decode()
        client.AdmissionregistrationV1Api(self.api).create_validating_webhook_configuration(
            self._configuration(f"https://127.0.0.1:{port}/validate", ca)
        )
        self._wait_active()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
        client.AdmissionregistrationV1Api(self.api).delete_validating_webhook_configuration(
            self.name
        )
        self.server.shutdown()

    def release(self) -> None:
        """Let every held create, and all later ones, through."""
        self.released.set()

    def _configuration(self, url: str, ca: str) -> dict[str, Any]:
        return {
            "metadata": {"name": self.name},
            "webhooks": [
                {
                    "name": "hold.dtjob-test.io",
                    "clientConfig": {"url": url, "caBundle": ca},
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                    },
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": TIMEOUT_SECONDS,
                }
            ],
        }

    def _wait_active(self) -> None:
        """The API server picks a new configuration up asynchronously: dry-run creates
        until one reaches the webhook."""
        core = client.CoreV1Api(self.api)
        probe = {
            "metadata": {"name": "webhook-probe"},
            "spec": {"containers": [{"name": "c", "image": "registry.local/probe:1"}]},
        }

        def reached() -> bool:
            core.create_namespaced_pod(self.namespace, probe, dry_run="All")
            return self.dry_runs > 0

        wait_for(reached, timeout=30, interval=0.5, what=f"webhook {self.name} active")
