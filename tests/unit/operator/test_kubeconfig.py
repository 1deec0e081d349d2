"""The operator's own kubeconfig and service-account loader (kubeconfig.py): what kubectl
would pick from the same files, tokens that rotate (a token file, an exec plugin) fetched
anew, and what it does not support refused with a message that says what to use."""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from dtjob_operator import kubeconfig
from dtjob_operator.kubeconfig import ClusterAccess, ConfigError, from_kubeconfig
from dtjob_operator.kubehttp import ApiException, HttpClient


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def config(current: str | None, clusters: dict[str, Any], users: dict[str, Any],
           contexts: dict[str, tuple[str, str, str | None]]) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": {"cluster": c, "user": u, "namespace": ns}}
                     for n, (c, u, ns) in contexts.items()],
    }  # fmt: skip


def test_the_current_context_with_certificate_data_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub" / "config", config(
        "b",
        {"one": {"server": "https://one:6443/", "certificate-authority-data": b64("CA")},
         "two": {"server": "https://two:6443", "certificate-authority": "ca.crt",
                 "tls-server-name": "api.two"}},
        {"u1": {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")},
         "u2": {"client-certificate": "u2.crt", "client-key": "/abs/u2.key"}},
        {"a": ("one", "u1", None), "b": ("two", "u2", "team-b")},
    ))  # fmt: skip
    access = from_kubeconfig([path])
    assert access.server == "https://two:6443"
    assert access.ca_file == str(tmp_path / "sub" / "ca.crt")  # relative to the file
    assert access.cert_file == str(tmp_path / "sub" / "u2.crt")
    assert access.key_file == "/abs/u2.key"
    assert access.tls_server_name == "api.two" and access.namespace == "team-b"
    other = from_kubeconfig([path], context="a")
    assert other.server == "https://one:6443"  # the trailing slash dropped
    assert other.ca_data == "CA" and other.cert_data == b"CERT" and other.key_data == b"KEY"
    assert other.namespace is None


def test_several_files_merge_as_kubectl_merges_them(tmp_path: Path, monkeypatch: Any) -> None:
    first = write(tmp_path / "a", config(
        None, {"c": {"server": "https://first"}}, {"u": {"token": "t1"}}, {"x": ("c", "u", None)}
    ))  # fmt: skip
    second = write(tmp_path / "b", config(
        "x", {"c": {"server": "https://second"}, "d": {"server": "https://d"}},
        {"u": {"token": "t2"}}, {"x": ("d", "u", None)},
    ))  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(tmp_path / "none"),
                                                      str(second)]))  # fmt: skip
    access = from_kubeconfig()
    # current-context from the only file that sets it; context, cluster and user from the
    # first file that names them; a listed file that does not exist is skipped.
    assert (access.server, access.bearer()) == ("https://first", "t1")


def test_what_is_not_supported_is_refused_with_what_to_use(tmp_path: Path) -> None:
    for user, said in (
        ({"auth-provider": {"name": "gcp"}}, "exec plugin"),
        ({"username": "admin", "password": "x"}, "removed in 1.19"),
    ):
        path = write(tmp_path / "c", config(
            "x", {"c": {"server": "https://s"}}, {"u": user}, {"x": ("c", "u", None)}
        ))  # fmt: skip
        with pytest.raises(ConfigError, match=said):
            from_kubeconfig([path])
    with pytest.raises(ConfigError, match="context 'nope' not found"):
        from_kubeconfig([path], context="nope")
    with pytest.raises(ConfigError, match="no Kubernetes configuration"):
        from_kubeconfig([tmp_path / "missing"])


def test_a_token_file_is_read_again_once_it_may_have_rotated(tmp_path: Path,
                                                             monkeypatch: Any) -> None:  # fmt: skip
    token = tmp_path / "token"
    token.write_text("first\n")
    access = ClusterAccess(server="https://s", token_file=str(token))
    assert access.bearer() == "first"
    token.write_text("second")
    assert access.bearer() == "first"  # within the minute: the one read
    monkeypatch.setattr(kubeconfig, "TOKEN_FILE_REREAD_SECONDS", 0.0)
    assert access.bearer() == "second"


def test_in_cluster_access_from_the_service_account(tmp_path: Path, monkeypatch: Any) -> None:
    for name, text in (("token", "sa-token"), ("ca.crt", "CA"), ("namespace", "ops\n")):
        (tmp_path / name).write_text(text)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    access = kubeconfig.in_cluster(tmp_path)
    assert access.server == "https://[fd00::1]:443"
    assert access.ca_file == str(tmp_path / "ca.crt") and access.namespace == "ops"
    assert access.bearer() == "sa-token"


PLUGIN = """
import json, os, sys
runs = int(open("runs").read()) + 1 if os.path.exists("runs") else 1
open("runs", "w").write(str(runs))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["kind"] == "ExecCredential" and os.environ["PLUGIN_ENV"] == "1"
status = {"token": f"tok-{runs}"}
if len(sys.argv) > 1:
    status["expirationTimestamp"] = sys.argv[1]
print(json.dumps({"kind": "ExecCredential", "status": status}))
"""


def exec_plugin(tmp_path: Path, expires: str | None) -> dict[str, Any]:
    """A real exec credential plugin, run where the kubeconfig is: counts its runs and
    answers a new token each time."""
    (tmp_path / "plugin.py").write_text(PLUGIN)
    return {"command": sys.executable, "args": ["plugin.py", *([expires] if expires else [])],
            "_dir": str(tmp_path), "env": [{"name": "PLUGIN_ENV", "value": "1"}]}  # fmt: skip


def test_an_exec_plugins_token_is_asked_for_again_when_it_expires(tmp_path: Path) -> None:
    lasting = ClusterAccess(server="https://s", exec_config=exec_plugin(tmp_path, None))
    assert lasting.bearer() == "tok-1" and lasting.bearer() == "tok-1"
    lasting.expire_token()  # a 401
    assert lasting.bearer() == "tok-2"
    expired = ClusterAccess(
        server="https://s", exec_config=exec_plugin(tmp_path, "2020-01-01T00:00:00Z")
    )
    assert expired.bearer() == "tok-3" and expired.bearer() == "tok-4"


def test_a_failing_exec_plugin_says_why(tmp_path: Path) -> None:
    script = tmp_path / "fail.sh"
    script.write_text("#!/bin/sh\necho 'not logged in: run aws sso login' >&2\nexit 1\n")
    script.chmod(0o755)
    access = ClusterAccess(server="https://s", exec_config={"command": str(script)})
    with pytest.raises(ConfigError, match="exited 1: not logged in"):
        access.bearer()


class TokenServer(ThreadingHTTPServer):
    """Answers 401 unless the bearer token is `good`; records the tokens it saw."""

    good = "new"
    seen: list[str]


class TokenHandler(BaseHTTPRequestHandler):
    server: TokenServer

    def do_GET(self) -> None:
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        self.server.seen.append(token)
        ok = token == self.server.good
        body = json.dumps({"items": []} if ok else {"kind": "Status", "code": 401}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def token_server() -> Iterator[TokenServer]:
    srv = TokenServer(("127.0.0.1", 0), TokenHandler)
    srv.seen = []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_a_401_fetches_a_rotated_token_once_then_raises(token_server: TokenServer,
                                                        tmp_path: Path) -> None:  # fmt: skip
    token = tmp_path / "token"
    token.write_text("old")
    server = f"http://127.0.0.1:{token_server.server_address[1]}"
    http = HttpClient(ClusterAccess(server=server, token_file=str(token)), retries=0)
    assert http.access.bearer() == "old"
    token.write_text("new")  # rotated on disk; the client still holds "old"
    assert http.json("GET", "/api/v1/nodes") == {"items": []}
    assert token_server.seen == ["old", "new"]
    token.write_text("revoked")
    token_server.good = "never"
    http.access.expire_token()
    with pytest.raises(ApiException) as err:
        http.json("GET", "/api/v1/nodes")
    assert err.value.status == 401  # asked again once, not for ever
    assert token_server.seen[2:] == ["revoked", "revoked"]
    static = HttpClient(ClusterAccess(server=server, token="fixed"), retries=0)
    with pytest.raises(ApiException):
        static.json("GET", "/api/v1/nodes")
    assert token_server.seen[4:] == ["fixed"]  # a token that cannot rotate: no retry
