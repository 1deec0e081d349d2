"""The cluster for integration tests: the local control plane from hack/cluster.py (started
on demand, the same code as `make cluster-up`), or the cluster DTJOB_KUBECONFIG names.

A cluster a pytest session started is stopped by the last session that finishes (unless
DTJOB_KEEP_CLUSTER=1); one started with `make cluster-up` is left running.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from helpers.cluster import cluster_cmd
from helpers.kube import KWOK_NODE, MADE_NAMESPACES, create_namespace, delete_namespace_now


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    api: client.ApiClient
    kwok: bool  # KWOK fake GPU nodes (driven by the hack/kwok stages) are there

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)


def _has_fake_gpu_nodes(api: client.ApiClient) -> bool:
    """A cluster started by `make cluster-up` elsewhere has them; a real cluster has not."""
    nodes = client.CoreV1Api(api).list_node(label_selector="nvidia.com/gpu.present=true").items
    return any(n.metadata.annotations.get(KWOK_NODE) == "fake" for n in nodes)


def _live_users(users: Path) -> list[Path]:
    live = []
    for f in users.glob("*"):
        if Path(f"/proc/{f.name}").exists():
            live.append(f)
        else:
            f.unlink(missing_ok=True)  # a session that crashed
    return live


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("DTJOB_KUBECONFIG")
    if external:
        api = config.new_client_from_config(external)
        yield Cluster(Path(external), api, kwok=_has_fake_gpu_nodes(api))
        return
    kubeconfig = Path(cluster_cmd("kubeconfig").stdout.strip())
    state = kubeconfig.parent
    users = state / "pytest-sessions"
    users.mkdir(parents=True, exist_ok=True)
    me = users / str(os.getpid())
    me.touch()
    mark = state / "started-by-pytest"  # hack/cluster.py removes it on a manual cluster-up
    was_running = cluster_cmd("status").returncode == 0
    up = cluster_cmd("up", {**os.environ, "DTJOB_CLUSTER_BY_FIXTURE": "1"})
    if up.returncode != 0:
        me.unlink(missing_ok=True)
        pytest.fail(f"local cluster did not start: {up.stderr.strip()}", pytrace=False)
    if not was_running:
        mark.touch()
    try:
        yield Cluster(kubeconfig, config.new_client_from_config(str(kubeconfig)), kwok=True)
    finally:
        me.unlink(missing_ok=True)
        # The last session out stops a cluster that a session started.
        keep = os.environ.get("DTJOB_KEEP_CLUSTER") == "1"
        if mark.exists() and not keep and not _live_users(users):
            cluster_cmd("down")
            mark.unlink(missing_ok=True)


@pytest.fixture
def local_cluster(cluster: Cluster) -> Cluster:
    """For tests that drive KWOK's fake pods and nodes: skip on a cluster without them."""
    if not cluster.kwok:
        pytest.skip("needs KWOK fake GPU nodes (DTJOB_KUBECONFIG names a cluster without them)")
    return cluster


@pytest.fixture
def core(cluster: Cluster) -> client.CoreV1Api:
    return cluster.core


@pytest.fixture
def namespace(cluster: Cluster) -> str:
    """A fresh namespace per test, deleted afterwards (_namespaces_go_with_their_test)."""
    return create_namespace(cluster.core)


@pytest.fixture(autouse=True)
def _namespaces_go_with_their_test() -> Iterator[None]:
    """The namespaces a test made with create_namespace are deleted, pods first and at once,
    when it ends, passed or failed; the explicit delete at a test's end covers a pass only.
    Those of module fixtures are made before this runs (pytest sets up wider scopes first)
    and stay theirs."""
    before = len(MADE_NAMESPACES)
    yield
    for core, name in MADE_NAMESPACES[before:]:
        delete_namespace_now(core, name)
    del MADE_NAMESPACES[before:]
