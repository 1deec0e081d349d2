"""The end-to-end tier: the local cluster plus its REAL node (`make cluster-up NODE=real`),
the operator and trainer images built from this repository's Dockerfiles and pushed to the
node's registry, which the node pulls them from, and the chart installed with Helm
(hack/realnode-helm.sh). Set up once per session; cold, that builds
everything (see docs/real-node.md), warm it takes seconds. `make test-e2e` runs the same
set-up (hack/realnode-up.sh) before pytest, so a cold build is not charged to the first
test's timeout; a bare `pytest -m e2e` on a cold machine needs that script run first.

A cluster this session started is stopped at the end (like tests/integration), unless
DTJOB_KEEP_CLUSTER=1 or another pytest session still uses it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.cluster import CLUSTER_PY, REPO, cluster_cmd
from helpers.realnode import E2E

SETUP_TIMEOUT = 3600  # a cold machine builds kubelet, CoreDNS and a multi-GB trainer image


def _run(what: str, argv: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=SETUP_TIMEOUT)
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        pytest.fail(f"e2e set-up: {what} failed: {' / '.join(last)}", pytrace=False)


@pytest.fixture(scope="session")
def e2e() -> Iterator[E2E]:
    if os.environ.get("DTJOB_KUBECONFIG"):
        pytest.skip("e2e builds its own real node; DTJOB_KUBECONFIG names another cluster")
    if os.geteuid() != 0:
        pytest.skip("the real node needs root (containerd, CNI, iptables)")
    kubeconfig = Path(cluster_cmd("kubeconfig").stdout.strip())
    state = kubeconfig.parent
    users = state / "pytest-sessions"
    users.mkdir(parents=True, exist_ok=True)
    me = users / str(os.getpid())
    me.touch()
    mark = state / "started-by-pytest"
    was_running = cluster_cmd("status").returncode == 0
    env = {**os.environ, "DTJOB_NODE": "real", "DTJOB_CLUSTER_BY_FIXTURE": "1"}
    env["DTJOB_CUSTOM_IMAGE"] = "1"  # test_custom_image's, as hack/realnode-up.sh e2e builds it
    try:
        _run("cluster-up NODE=real", [sys.executable, str(CLUSTER_PY), "up"], env)
        if not was_running:
            mark.touch()
        bins = (state / "bin-dir").read_text().strip()
        env = {
            **env,
            "KUBECONFIG": str(kubeconfig),
            "PATH": f"{bins}:{os.environ['PATH']}",
            "CONTAINERD_SOCK": str(state / "realnode" / "containerd.sock"),
        }
        _run(
            "images (hack/images.sh all: build, push)",
            [str(REPO / "hack" / "images.sh"), "all"],
            env,
        )
        _run("helm install", [str(REPO / "hack" / "realnode-helm.sh"), "install"], env)
        yield E2E(kubeconfig=kubeconfig, state=state, env=env)
    finally:
        me.unlink(missing_ok=True)
        live = [f for f in users.glob("*") if Path(f"/proc/{f.name}").exists()]
        if mark.exists() and os.environ.get("DTJOB_KEEP_CLUSTER") != "1" and not live:
            cluster_cmd("down")
            mark.unlink(missing_ok=True)


@pytest.fixture
def e2e_namespace(e2e: E2E) -> Iterator[str]:
    name = e2e.new_namespace()
    yield name
    e2e.kubectl("delete", "namespace", name, "--wait=false", check=False)
