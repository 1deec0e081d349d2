"""A real Prometheus (the pinned build) scrapes the host operator the way the chart's
ServiceMonitor says: endpoints discovery through the API server finds the chart's metrics
Service by its labels and port name, and the job label comes from the Service's
app.kubernetes.io/name. It reads dtjob_jobs and a running job's progress gauges, and loads
the chart's alert rules.

The operator runs on the host, not in a pod, so the metrics Service here is the chart's
without its pod selector, and its Endpoints name this machine's address (the API server
refuses loopback addresses in Endpoints; the operator's metrics server listens on every
interface)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from integration.operator.test_history import a_running_job
from integration.operator.test_progress_helper import pod_identity

from dtjob_trainer.report import reporter_from_env
from helpers.jobs import status
from helpers.kube import wait_for
from helpers.prometheus import CHART, Prometheus, of_kind, render_chart, write_config

pytestmark = [pytest.mark.integration]

RELEASE = "dtj"
# The chart's default is 30s; one second keeps the test short (same translation).
FAST = ("metrics.serviceMonitor.interval=1s", "metrics.serviceMonitor.scrapeTimeout=1s")


def host_address() -> str:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))
        except OSError as e:
            pytest.fail(f"no default route, so no non-loopback address for the Endpoints: {e}")
        address: str = s.getsockname()[0]
        return address


@pytest.fixture
def prometheus(
    cluster: Any, namespace: str, metrics_port: int, tmp_path: Path
) -> Iterator[Prometheus]:
    objects = render_chart(RELEASE, namespace, f"metrics.port={metrics_port}", *FAST)
    service = of_kind(objects, "Service")
    del service["spec"]["selector"]  # no pod: the Endpoints below are written by hand
    service["spec"]["ports"][0]["targetPort"] = metrics_port
    cluster.core.create_namespaced_service(namespace, service)
    cluster.core.create_namespaced_endpoints(namespace, {
        "metadata": {"name": service["metadata"]["name"], "labels": service["metadata"]["labels"]},
        "subsets": [{"addresses": [{"ip": host_address()}],
                     "ports": [{"name": "metrics", "port": metrics_port, "protocol": "TCP"}]}],
    })  # fmt: skip
    prom = Prometheus(write_config(objects, cluster.kubeconfig, tmp_path), tmp_path)
    yield prom
    prom.stop()
    print(f"prometheus log: {prom.log}")


def only(series: dict[str, float]) -> tuple[dict[str, str], float]:
    """The one series of a query result, as (labels, value)."""
    assert len(series) <= 1, series
    ((labels, value),) = series.items()
    return json.loads(labels), value


@pytest.mark.usefixtures("metered_operator")
def test_prometheus_scrapes_the_operator_through_the_chart_service_monitor(
    cluster: Any, namespace: str, tmp_path: Path, metrics_port: int, prometheus: Prometheus
) -> None:
    target = prometheus.wait_target_up("dtjob-operator", timeout=60)
    assert target["labels"]["namespace"] == namespace
    assert target["labels"]["service"] == f"{RELEASE}-dtjob-operator-metrics"
    assert target["labels"]["endpoint"] == "metrics"
    assert target["scrapeUrl"].endswith(f":{metrics_port}/metrics")

    name, _ = a_running_job(cluster, namespace, "prom")
    sa_dir = tmp_path / "sa"
    sa_dir.mkdir()
    reporter = reporter_from_env(pod_identity(cluster, namespace, name, sa_dir), sa_dir=str(sa_dir))
    assert reporter.update(
        {"step": 40, "totalSteps": 100, "loss": 0.25, "samplesPerSecond": 512.0}, force=True
    )
    progress = wait_for(lambda: status(cluster.api, namespace, name).get("progress"),
                        what="the job's progress in its status")  # fmt: skip

    def value(expr: str) -> float | None:
        series = prometheus.query(expr)
        return only(series)[1] if series else None

    wait_for(lambda: value('dtjob_jobs{phase="Running"}') == 1, timeout=30,
             what="one Running job in dtjob_jobs")  # fmt: skip
    job = f'namespace="{namespace}",job="{name}"'
    wait_for(lambda: value(f"dtjob_job_step{{{job}}}") == progress["step"], timeout=30,
             what="the job's step in Prometheus")  # fmt: skip
    # honor_labels: the series keeps the operator's `job` (the job's name), not the scrape job.
    labels, loss = only(prometheus.query(f"dtjob_job_loss{{{job}}}"))
    assert (labels["job"], labels["namespace"], loss) == (name, namespace, progress["loss"])
    assert value(f"dtjob_job_total_steps{{{job}}}") == progress["totalSteps"]
    assert value(f"dtjob_job_samples_per_second{{{job}}}") == progress["samplesPerSecond"]

    # The chart's rules loaded and evaluate; DTJobOperatorDown looks for the scrape job the
    # ServiceMonitor's jobLabel names, so with the operator scraped it is not pending.
    rules = yaml.safe_load((CHART / "files" / "prometheus" / "dtjob-rules.yaml").read_text())

    def evaluated() -> dict[str, dict[str, Any]] | None:
        groups = prometheus.api("rules")["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        ok = all(r["health"] == "ok" for r in loaded.values())
        if ok and loaded.get("DTJobOperatorDown", {}).get("state") == "inactive":
            assert [g["name"] for g in groups] == [g["name"] for g in rules["groups"]]
            return loaded
        return None

    loaded = wait_for(evaluated, timeout=30, what="the chart's rules evaluated, healthy")
    assert set(loaded) == {r["alert"] for g in rules["groups"] for r in g["rules"]}
