"""cluster-up / cluster-down on a SECOND local cluster (own state dir and ports), so the
session cluster other tests use is never touched: idempotent start, a clean stop, and one
clear line when something is in the way."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.cluster import cluster_cmd

pytestmark = pytest.mark.integration

PORT_BASE = 26440  # far from the default 16440 range
PORTS = (PORT_BASE, PORT_BASE + 1, PORT_BASE + 3, PORT_BASE + 4, PORT_BASE + 5)


def processes_using(state: Path) -> dict[int, str]:
    """pid -> command of every live process whose command line names the state dir."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(state).encode() in b" ".join(argv):
            found[int(proc.name)] = argv[0].decode()
    return found


def listen_addresses(pids: list[int]) -> set[str]:
    """'ip:port' of every TCP listening socket the processes hold (from /proc/net/tcp*)."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd) if fd.is_symlink() else ""
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A = LISTEN
                addr, port = local.split(":")
                ip = (
                    ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
                    if width == 8
                    else addr  # any IPv6 listener is itself a failure below
                )
                found.add(f"{ip}:{int(port, 16)}")
    return found


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def second(tmp_path: Path) -> Iterator[dict[str, str]]:
    if os.environ.get("DTJOB_KUBECONFIG"):
        pytest.skip("DTJOB_KUBECONFIG is set: this run builds and starts no local cluster")
    env = dict(os.environ)
    env |= {
        "DTJOB_CLUSTER_STATE": str(tmp_path / "state"),
        "DTJOB_CLUSTER_PORT_BASE": str(PORT_BASE),
        "DTJOB_NODES": "2",
        "DTJOB_GPUS_PER_NODE": "4",
        "DTJOB_NODE_LABELS": "pool=test,dtjob.io/accelerator=h100",
    }
    if any(listening(p) for p in PORTS):
        pytest.skip(f"ports {PORT_BASE}-{PORT_BASE + 5} busy (another run of this test?)")
    yield env
    cluster_cmd("down", env)  # whatever a failed assertion left behind


def test_up_twice_is_one_cluster_and_down_leaves_nothing(second):
    state = Path(second["DTJOB_CLUSTER_STATE"])

    first = cluster_cmd("up", second)
    assert first.returncode == 0, first.stderr
    assert "2 nodes x 4 nvidia.com/gpu Ready" in first.stderr
    pids = processes_using(state)
    assert sorted(Path(c).name for c in pids.values()) == sorted(
        ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
    )
    assert listen_addresses(list(pids)) == {f"127.0.0.1:{p}" for p in PORTS}

    again = cluster_cmd("up", second)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert processes_using(state) == pids  # the same processes, nothing new
    status = cluster_cmd("status", second)
    assert status.returncode == 0
    assert "nodes 2/2 Ready" in status.stdout

    down = cluster_cmd("down", second)

    assert down.returncode == 0, down.stderr
    assert processes_using(state) == {}
    assert not [p for p in PORTS if listening(p)]
    assert cluster_cmd("status", second).returncode == 1


def test_port_in_use_is_one_clear_line_and_starts_nothing(second):
    state = Path(second["DTJOB_CLUSTER_STATE"])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", PORT_BASE + 3))
        squatter.listen()

        result = cluster_cmd("up", second)

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == (
        f"cluster-up: port 127.0.0.1:{PORT_BASE + 3} (for kube-apiserver) is in use; "
        "free it or set DTJOB_CLUSTER_PORT_BASE to another range"
    )
    assert processes_using(state) == {}


def test_component_dying_on_start_names_it_and_its_log(second):
    state = Path(second["DTJOB_CLUSTER_STATE"])
    assert cluster_cmd("up", second).returncode == 0
    assert cluster_cmd("down", second).returncode == 0
    # A serving key that does not match its certificate: the real apiserver refuses to start.
    (state / "pki" / "apiserver.key").write_text((state / "pki" / "admin.key").read_text())

    result = cluster_cmd("up", second)

    assert result.returncode == 1
    log = state / "logs" / "kube-apiserver.log"
    assert result.stderr.strip().splitlines()[-1] == (
        f"cluster-up: kube-apiserver exited with code 1 during start-up; see {log}"
    )
    assert processes_using(state) == {}  # etcd, started with it, was stopped too
