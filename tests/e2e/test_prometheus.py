"""A real Prometheus scrapes the operator pod the chart installed, through the chart's metrics
Service, with the scrape config the chart's ServiceMonitor stands for (helpers/prometheus.py:
endpoints discovery through the API server, the Service picked by its labels and port name,
the job named by its app.kubernetes.io/name). Prometheus runs on the host, which reaches pod
IPs over the real node's bridge (hack/realnode.py). While a CPU example trains, the loss
Prometheus holds for the job is the loss in the job's status; dtjob_jobs counts it Running,
then Succeeded; and the chart's alert rules load and evaluate."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.kube import wait_for
from helpers.prometheus import Prometheus, of_kind, render_chart, write_config
from helpers.realnode import E2E, RELEASE, RELEASE_NS, watch_job

# The release hack/realnode-helm.sh installs (its metrics Service is on by default); only the
# scrape interval differs from the chart's default 30s, to keep the test short.
FAST = ("metrics.serviceMonitor.interval=2s", "metrics.serviceMonitor.scrapeTimeout=2s")


@pytest.fixture(scope="module")
def prometheus(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    directory = tmp_path_factory.mktemp("prometheus")
    objects = render_chart(RELEASE, RELEASE_NS, *FAST)
    prom = Prometheus(write_config(objects, e2e.kubeconfig, directory), directory)
    yield prom
    prom.stop()
    print(f"prometheus log: {prom.log}")


def value(prom: Prometheus, expr: str) -> float | None:
    series = prom.query(expr)
    assert len(series) <= 1, (expr, series)
    return next(iter(series.values()), None)


@pytest.mark.timeout(1300)  # up to 600 s to match the loss, 600 to finish
def test_prometheus_reads_the_operator_pods_job_metrics(
    e2e: E2E, e2e_namespace: str, prometheus: Prometheus
) -> None:
    target = prometheus.wait_target_up("dtjob-operator", timeout=120)
    assert target["labels"]["namespace"] == RELEASE_NS
    assert target["labels"]["pod"].startswith(f"{RELEASE}-dtjob-operator-")

    ns = e2e_namespace
    # Long enough for a scrape to meet a report: the fast machine trained 400 steps in a few
    # seconds and the job ended before Prometheus and the status agreed on a loss.
    name = e2e.apply_example("data-parallel", ns, trainer__steps=3000)["metadata"]["name"]
    loss = f'dtjob_job_loss{{namespace="{ns}",job="{name}"}}'

    def progress() -> dict[str, Any]:
        st = e2e.job(ns, name).get("status", {})
        return dict(st.get("progress") or {}, phase=st.get("phase"))

    def same_loss() -> dict[str, Any] | None:
        """The status's loss, unchanged around a query that returned it (a report every few
        seconds, a scrape every two: most reads agree)."""
        before = progress()
        assert before["phase"] not in ("Succeeded", "Failed"), f"{name} ended first: {before}"
        if before["phase"] != "Running" or not isinstance(before.get("loss"), float | int):
            return None
        seen = value(prometheus, loss)
        after = progress()
        moved = (after.get("step"), after.get("loss")) != (before.get("step"), before["loss"])
        if seen is None or moved:
            return None
        return before if math.isclose(seen, before["loss"], rel_tol=1e-9) else None

    running = wait_for(same_loss, timeout=600, interval=1,
                       what=f"Prometheus's {loss} equal to the job's status loss")  # fmt: skip
    assert (value(prometheus, 'dtjob_jobs{phase="Running"}') or 0) >= 1, running
    step = value(prometheus, f'dtjob_job_step{{namespace="{ns}",job="{name}"}}')
    assert step is not None and step >= running.get("step", 0)

    done = watch_job(e2e, ns, name, timeout=600)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    # A finished job's series go; dtjob_jobs counts it Succeeded.
    wait_for(lambda: value(prometheus, loss) is None, timeout=60,
             what="the finished job's loss series gone")  # fmt: skip
    wait_for(lambda: (value(prometheus, 'dtjob_jobs{phase="Succeeded"}') or 0) >= 1,
             timeout=60, what="a Succeeded job in dtjob_jobs")  # fmt: skip

    def healthy() -> list[dict[str, Any]] | None:
        rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        return rules if rules and all(r["health"] == "ok" for r in rules) else None

    rules = wait_for(healthy, timeout=60, what="the chart's alert rules evaluated, healthy")
    groups = of_kind(render_chart(RELEASE, RELEASE_NS), "PrometheusRule")["spec"]["groups"]
    expected = {r["alert"] for g in groups for r in g["rules"]}
    assert {r["name"] for r in rules} == expected
    assert {r["name"]: r["state"] for r in rules}["DTJobOperatorDown"] == "inactive"
