"""The real Kueue (tests/helpers/kueue.py) for this package's tests: started once for the
package and stopped after it: it watches every pod of the cluster, and the rest of the
integration lane should not pay for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from helpers.kueue import Kueue, install_crds

PODS_READY_TIMEOUT_SECONDS = 15
# A gang evicted for not getting ready is requeued once (after a 1 s backoff), and the
# second time Kueue deactivates its Workload: the job must stop for good and say why.
REQUEUE_LIMIT = 1
PODS_READY = {
    "timeout": f"{PODS_READY_TIMEOUT_SECONDS}s",
    "blockAdmission": False,
    "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": REQUEUE_LIMIT,
                          "backoffBaseSeconds": 1, "backoffMaxSeconds": 2},
}  # fmt: skip


@pytest.fixture(scope="package")
def kueue(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kueue]:
    workdir = tmp_path_factory.mktemp("kueue")
    install_crds(cluster.kubeconfig, workdir)
    try:
        cluster.core.create_namespace({"metadata": {"name": "kueue-system"}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    # waitForPodsReady on, as Kueue 0.19+ has it by default: a job that never reports its
    # pods ready is evicted after the timeout (short here, so a test can wait it out).
    proc = Kueue(cluster.kubeconfig, workdir, wait_for_pods_ready=PODS_READY)
    yield proc
    proc.stop()
