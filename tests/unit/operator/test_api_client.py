"""The one door to the API server: timeouts on every call, the leader write guard, and the
'reachable again' signal. Run against local sockets (no API server needed to prove them)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from dtjob_operator.api_client import (
    GuardedApiClient,
    NotLeaderError,
    is_transport_error,
    request_kind,
)
from dtjob_operator.k8s import KubeApi
from dtjob_operator.kubeconfig import ClusterAccess


def make_client(port: int, timeout: tuple[float, float] = (1.0, 1.0)) -> GuardedApiClient:
    return GuardedApiClient(ClusterAccess(server=f"http://127.0.0.1:{port}"), timeout, retries=0)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers: a half-open API server."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except TimeoutError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in conns:
        c.close()
    srv.close()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def test_a_call_to_a_server_that_never_answers_times_out(silent_server: int) -> None:
    api = KubeApi(make_client(silent_server, (1.0, 0.5)))
    started = time.monotonic()
    with pytest.raises(Exception) as err:
        api.list_nodes()
    assert is_transport_error(err.value)
    assert time.monotonic() - started < 5


def test_a_replica_that_does_not_lead_sends_no_write() -> None:
    port = free_port()  # nothing listens: a write that got out would fail differently
    api_client = make_client(port)
    api_client.may_write = lambda: False
    api = KubeApi(api_client)
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    with pytest.raises(NotLeaderError):
        api.create(pod)
    with pytest.raises(NotLeaderError):
        api.delete_pod("ns", "p")
    with pytest.raises(NotLeaderError):
        api.patch_status("ns", "j", {"phase": "Running"})
    with pytest.raises(NotLeaderError):
        api.emit_event({"metadata": {"name": "j", "namespace": "ns", "uid": "u"}}, "Normal",
                       "X", "y")  # fmt: skip
    # Reads, and the elector's own Lease writes, still go out (and fail: nothing listens).
    with pytest.raises(Exception) as err:
        api.list_nodes()
    assert is_transport_error(err.value)
    with pytest.raises(Exception) as err:
        api.create_lease("ns", {"metadata": {"name": "l"}})
    assert is_transport_error(err.value)


def test_the_first_answer_after_an_outage_fires_on_recovered(silent_server: int) -> None:
    port = free_port()
    api_client = make_client(port)
    recovered = threading.Event()
    downtimes: list[float] = []

    def on_recovered(seconds: float) -> None:
        downtimes.append(seconds)
        recovered.set()

    api_client.on_recovered = on_recovered
    api = KubeApi(api_client)
    with pytest.raises(Exception) as err:
        api.list_nodes()
    assert is_transport_error(err.value)
    time.sleep(1.1)  # a blip shorter than RECOVERY_MIN_SECONDS is not an outage
    # The server comes back (a tiny HTTP server answering one empty list).
    srv = socket.socket()
    srv.bind(("127.0.0.1", port))
    srv.listen(1)

    def answer() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        body = b'{"items": []}'
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        conn.close()

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    assert api.list_nodes() == []
    assert recovered.wait(5) and len(downtimes) == 1 and downtimes[0] >= 0
    t.join()
    srv.close()


@pytest.mark.parametrize(
    ("method", "url", "kind"),
    [
        (
            "GET",
            "https://h/api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=500",
            ("LIST", "pods"),
        ),
        ("GET", "https://h/api/v1/pods?watch=True&resourceVersion=5", ("WATCH", "pods")),
        ("GET", "https://h/api/v1/namespaces/ns/pods/p-0", ("GET", "pods")),
        ("POST", "https://h/api/v1/namespaces/ns/pods", ("POST", "pods")),
        ("POST", "https://h/api/v1/namespaces/ns/pods/p/eviction", ("POST", "pods/eviction")),
        (
            "PATCH",
            "https://h/apis/dtjob.io/v1alpha1/namespaces/ns/distributedtrainingjobs/j/status",
            ("PATCH", "distributedtrainingjobs/status"),
        ),
        (
            "GET",
            "https://h/apis/dtjob.io/v1alpha1/distributedtrainingjobs?limit=500",
            ("LIST", "distributedtrainingjobs"),
        ),
        ("GET", "https://h/api/v1/nodes", ("LIST", "nodes")),
        ("GET", "https://h/api/v1/namespaces/ns", ("GET", "namespaces")),
        ("GET", "https://h/version", ("GET", "(non-resource)")),
    ],
)
def test_requests_are_named_as_the_api_servers_metrics_name_them(
    method: str, url: str, kind: tuple[str, str]
) -> None:
    assert request_kind(method, url) == kind


def test_the_operator_process_never_imports_the_generated_client() -> None:
    """`python -m dtjob_operator` loads the whole operator (kopf included) without the
    `kubernetes` package, installed or not: its generated client is some 20 MiB of heap
    (kubehttp.py says why the operator does not need it)."""
    code = (
        "import runpy, sys; sys.argv = ['x']; "
        "runpy.run_module('dtjob_operator.__main__', run_name='not_main'); "
        "import dtjob_operator.run, dtjob_operator.handlers; "
        "print(sorted(m for m in sys.modules if m.startswith('kubernetes') and sys.modules[m]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
