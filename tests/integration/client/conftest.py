"""The SDK and `kubectl dtj` against the real control plane, with the operator running on
the host (KWOK plays the kubelet, so pods never really run: the tests make them exit and
write the history ConfigMap the way rank 0 does)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from helpers.crd import install_crd
from helpers.operator import OperatorProcess

OPERATOR_ENV = {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:test", "DTJOB_RESYNC_SECONDS": "2"}


@pytest.fixture(scope="module")
def operator(cluster, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    install_crd(cluster.api)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(cluster.kubeconfig, log, OPERATOR_ENV)
    proc.start()
    yield proc
    proc.stop()
    print(f"operator log: {log}")
