"""The operator's Prometheus endpoint counts what it did."""

from __future__ import annotations

import socket
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.jobs import JobBuilder, create_job, wait_pods_running
from helpers.kube import unique, wait_for
from helpers.operator import OperatorProcess

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def metrics_port(cluster, crd) -> Iterator[int]:  # type: ignore[no-untyped-def]
    port = free_port()
    log = Path(tempfile.mkdtemp()) / "operator.log"
    proc = OperatorProcess(cluster.kubeconfig, log, {"DTJOB_METRICS_PORT": str(port)})
    proc.start()
    yield port
    proc.stop()


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


def test_metrics_count_pods_jobs_and_reconciles(cluster, namespace, metrics_port: int) -> None:
    name = unique("metrics")
    job = JobBuilder(name).role("worker", 3).build()
    create_job(cluster.api, namespace, job)
    wait_pods_running(cluster.core, namespace, name, 3)
    samples = wait_for(
        lambda: (m := scrape(metrics_port)).get('dtjob_jobs{phase="Running"}', 0) >= 1 and m,
        what="a Running job in dtjob_jobs",
    )
    assert samples["dtjob_pods_created_total"] >= 3
    assert samples["dtjob_reconcile_duration_seconds_count"] >= 1
