"""Progress reporting: the ConfigMap PATCH as an API server receives it (a real HTTP server
on localhost), throttling, and failures that never reach training."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import HTTPServer
from pathlib import Path

import pytest
from unit.trainer.fake_apiserver import ApiServer

from dtjob_trainer.env import read_env
from dtjob_trainer.progress import (
    PROGRESS_KEY,
    ConfigMapSink,
    FileSink,
    Progress,
    ProgressReporter,
    make_reporter,
)


@pytest.fixture
def api_server() -> Iterator[tuple[str, type[ApiServer]]]:
    handler = type("Handler", (ApiServer,), {"requests": [], "status": 200})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", handler
    server.shutdown()
    server.server_close()


def test_configmap_patch_is_a_merge_patch_of_one_key(
    api_server: tuple[str, type[ApiServer]], tmp_path: Path
) -> None:
    base, handler = api_server
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    url = f"{base}/api/v1/namespaces/ns/configmaps/j-progress"
    reporter = ProgressReporter(ConfigMapSink(url, str(token), None))
    reporter.update(force=True, step=7, totalSteps=100, loss=0.5, samplesPerSecond=12.0)
    (req,) = handler.requests
    assert req["path"] == "/api/v1/namespaces/ns/configmaps/j-progress"
    assert req["headers"]["Content-Type"] == "application/merge-patch+json"
    assert req["headers"]["Authorization"] == "Bearer secret-token"
    assert list(req["body"]) == ["data"] and list(req["body"]["data"]) == [PROGRESS_KEY]
    progress = json.loads(req["body"]["data"][PROGRESS_KEY])
    assert progress["step"] == 7 and progress["totalSteps"] == 100 and progress["loss"] == 0.5
    assert progress["updateTime"].endswith("Z")
    assert "accuracy" not in progress  # unset fields are left out


def test_failed_writes_are_logged_not_raised(
    api_server: tuple[str, type[ApiServer]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base, handler = api_server
    handler.status = 403
    token = tmp_path / "token"
    token.write_text("t")
    reporter = ProgressReporter(ConfigMapSink(f"{base}/x", str(token), None))
    reporter.update(force=True, step=1)
    dead = ProgressReporter(ConfigMapSink("http://127.0.0.1:1/x", str(token), None, timeout=1))
    dead.update(force=True, step=1)
    assert len(handler.requests) == 1
    assert caplog.text.count("progress report failed") == 2


def test_throttled_to_one_write_per_interval(tmp_path: Path) -> None:
    now = [100.0]
    reporter = ProgressReporter(FileSink(tmp_path), min_interval=5.0, clock=lambda: now[0])
    reporter.update(step=1)
    reporter.update(step=2)  # within 5 s: kept, not written
    assert json.loads((tmp_path / PROGRESS_KEY).read_text())["step"] == 1
    now[0] += 5.0
    reporter.update(loss=0.25)
    written = json.loads((tmp_path / PROGRESS_KEY).read_text())
    assert written["step"] == 2 and written["loss"] == 0.25
    reporter.update(force=True, step=3)
    assert json.loads((tmp_path / PROGRESS_KEY).read_text())["step"] == 3


def test_reporter_choice_by_rank(tmp_path: Path) -> None:
    base = {"MASTER_ADDR": "a", "MASTER_PORT": "1", "WORLD_SIZE": "2", "DTJ_CONFIG": "/c"}
    assert make_reporter(read_env({**base, "RANK": "1"}), str(tmp_path)).sink is None
    local = make_reporter(read_env({**base, "RANK": "0"}), str(tmp_path)).sink
    assert isinstance(local, FileSink)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test API server's certificate")
    key, cert = directory / "server.key", directory / "ca.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


def test_in_cluster_reporter_uses_the_service_account_over_tls(tmp_path: Path) -> None:
    """The pod's path end to end: API server address from the environment, TLS verified
    against the service account's CA, bearer token from its token file."""
    key, cert = _self_signed(tmp_path)
    (tmp_path / "token").write_text("sa-token")
    handler = type("Handler", (ApiServer,), {"requests": [], "status": 200})
    server = HTTPServer(("127.0.0.1", 0), handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = read_env(
            {
                "MASTER_ADDR": "a",
                "MASTER_PORT": "1",
                "WORLD_SIZE": "1",
                "RANK": "0",
                "DTJ_CONFIG": "/c",
                "DTJ_NAMESPACE": "team",
                "DTJ_PROGRESS_CONFIGMAP": "j-progress",
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(server.server_port),
            }
        )
        sink = ConfigMapSink.for_env(env, sa_dir=str(tmp_path))
        ProgressReporter(sink).update(force=True, step=5, message="Auto chose DataParallel")
    finally:
        server.shutdown()
        server.server_close()
    (req,) = handler.requests
    assert req["path"] == "/api/v1/namespaces/team/configmaps/j-progress"
    assert req["headers"]["Authorization"] == "Bearer sa-token"
    assert json.loads(req["body"]["data"][PROGRESS_KEY])["message"] == "Auto chose DataParallel"


def test_progress_json_leaves_out_unset_fields() -> None:
    assert json.loads(Progress(step=3, message="Auto chose FSDP").to_json()) == {
        "step": 3,
        "totalSteps": 0,
        "epoch": 0,
        "message": "Auto chose FSDP",
    }
