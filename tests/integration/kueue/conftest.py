"""The real Kueue (tests/helpers/kueue.py) for this package's tests, once per session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from helpers.kueue import Kueue, install_crds


@pytest.fixture(scope="session")
def kueue(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kueue]:
    workdir = tmp_path_factory.mktemp("kueue")
    install_crds(cluster.kubeconfig, workdir)
    try:
        cluster.core.create_namespace({"metadata": {"name": "kueue-system"}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    proc = Kueue(cluster.kubeconfig, workdir)
    yield proc
    proc.stop()
