"""The Grafana dashboard the chart ships (files/dashboards/dtjob.json): valid dashboard JSON
whose every query reads only metrics the operator exports, covering the views an admin needs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from unit.operator.promql import exported_names, metric_names
from unit.operator.test_chart import CHART

from dtjob_operator.metrics import OperatorMetrics

DASHBOARD = CHART / "files" / "dashboards" / "dtjob.json"


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def graph_panels() -> list[dict[str, Any]]:
    """Every panel but rows, including those nested in collapsed rows."""
    found = []
    for panel in dashboard()["panels"]:
        found += [p for p in [panel, *panel.get("panels", [])] if p["type"] != "row"]
    return found


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable."""
    found = [(p["title"], t["expr"]) for p in graph_panels() for t in p["targets"]]
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            found.append((f"variable {var['name']}", var["definition"]))
    return found


def test_it_is_a_dashboard_of_panels_with_targets() -> None:
    dash = dashboard()
    assert dash["title"] and dash["uid"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert len(graph_panels()) >= 6
    for panel in graph_panels():
        assert panel["title"] and panel["type"] in {"timeseries", "stat", "table", "bargauge"}
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        # The data source is the dashboard's variable, so it works with any Prometheus.
        assert panel["datasource"]["uid"] == "${datasource}"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"


def test_every_query_reads_only_metrics_the_operator_exports() -> None:
    exported = exported_names(OperatorMetrics().registry)
    assert "dtjob_gang_restarts_total" in exported  # the registry is read, not a hand list
    used: set[str] = set()
    for where, expr in queries():
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        used |= names
        unknown = names - exported
        assert not unknown, f"{where}: {sorted(unknown)} are not exported by the operator"
    assert "dtjob_job_loss" in used  # the per-job loss panel


def test_it_shows_what_admins_and_users_look_for() -> None:
    used = set().union(*(metric_names(expr) for _, expr in queries()))
    views = {
        "queue per namespace": "dtjob_admission_queued_jobs",
        "GPUs of admitted gangs": "dtjob_admission_admitted_gpus",
        "jobs by phase": "dtjob_jobs",
        "admission wait": "dtjob_admission_wait_seconds_bucket",
        "restarts": "dtjob_gang_restarts_total",
        "per-job loss": "dtjob_job_loss",
    }
    assert {view for view, metric in views.items() if metric not in used} == set()


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (namespace) (increase(dtjob_gang_restarts_total{ns=~"$x"}[5m]))',
         {"dtjob_gang_restarts_total"}),
        ("histogram_quantile(0.9, sum by (le) (rate(a_bucket[$__rate_interval])))", {"a_bucket"}),
        ("a / on (ns) group_left b offset 5m unless c > bool 1", {"a", "b", "c"}),
        ('absent(up{job="x"} == 1)', {"up"}),
        ("label_values(dtjob_jobs, phase)", {"dtjob_jobs"}),
    ],
)  # fmt: skip
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
