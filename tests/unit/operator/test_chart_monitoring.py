"""Optional monitoring objects of the chart: a ServiceMonitor for the metrics Service, a
PrometheusRule that is files/prometheus/dtjob-rules.yaml with the thresholds of the values,
and the Grafana dashboard in a ConfigMap for Grafana's sidecar. All off by default."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml
from unit.operator.promql import exported_names, metric_names
from unit.operator.test_chart import CHART, KUBE_VERSION, REPO, deployment, helm, render
from unit.operator.test_chart_schema import refusal

from dtjob_operator.metrics import OperatorMetrics

RULES = CHART / "files" / "prometheus" / "dtjob-rules.yaml"
ALL_ON = (
    "metrics.serviceMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "metrics.grafanaDashboard.enabled=true",
)


def of_kind(objects: dict[tuple[str, str], dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for (k, _), o in objects.items() if k == kind]
    return obj


def alerts(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def test_nothing_is_rendered_unless_enabled() -> None:
    kinds = {kind for kind, _ in render()}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    assert ("ConfigMap", "dtj-dtjob-operator-dashboard") not in render()


def test_the_service_monitor_scrapes_the_metrics_service_keeping_the_metrics_labels() -> None:
    objects = render(*ALL_ON, "metrics.serviceMonitor.labels.release=prom")
    monitor = of_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    service = objects[("Service", "dtj-dtjob-operator-metrics")]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["dtjob-system"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    # Without it Prometheus renames the jobs' `namespace` label to exported_namespace.
    assert endpoint["honorLabels"] is True
    # The scrape job is named after this label's value, which DTJobOperatorDown looks for.
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    assert f'job="{job}"' in alerts(of_kind(objects, "PrometheusRule"))["DTJobOperatorDown"]["expr"]
    err = refusal(
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.service.enabled=false"
    )
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in err


def test_the_rule_is_the_plain_rule_file_with_default_values() -> None:
    rule = of_kind(render("metrics.prometheusRule.enabled=true"), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert set(alerts(rule)) == {
        "DTJobQueuedTooLong", "DTJobStartingTooLong", "DTJobRestartsRising", "DTJobOperatorDown",
    }  # fmt: skip


def test_thresholds_come_from_values() -> None:
    rule = of_kind(
        render(
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.queuedFor=2h",
            "metrics.prometheusRule.startingFor=45m",
            "metrics.prometheusRule.restartsWindow=6h",
            "metrics.prometheusRule.restartsThreshold=10",
            "metrics.prometheusRule.operatorDownFor=90s",
            "nameOverride=dtjob-op",
        ),
        "PrometheusRule",
    )
    a = alerts(rule)
    assert a["DTJobQueuedTooLong"]["expr"].count("[2h]") == 2
    assert "2h" in a["DTJobQueuedTooLong"]["annotations"]["summary"]
    assert a["DTJobStartingTooLong"]["for"] == "45m"
    assert a["DTJobRestartsRising"]["expr"] == (
        "sum by (namespace) (increase(dtjob_gang_restarts_total[6h])) >= 10"
    )
    assert a["DTJobOperatorDown"]["for"] == "90s"
    assert a["DTJobOperatorDown"]["expr"] == 'absent(up{job="dtjob-op"} == 1)'
    # Prometheus's own templates pass through Helm untouched.
    assert "{{ $labels.namespace }}" in a["DTJobRestartsRising"]["annotations"]["summary"]


def test_the_rules_read_only_metrics_the_operator_exports() -> None:
    exported = exported_names(OperatorMetrics().registry) | {"up"}  # up: Prometheus's own
    rules = yaml.safe_load(RULES.read_text())
    for rule in (r for group in rules["groups"] for r in group["rules"]):
        names = metric_names(rule["expr"])
        assert names and names <= exported, (rule["alert"], names - exported)


def test_the_dashboard_config_map_carries_the_dashboard_for_the_sidecar() -> None:
    objects = render(
        "metrics.grafanaDashboard.enabled=true", "metrics.grafanaDashboard.namespace=monitoring"
    )
    cm = objects[("ConfigMap", "dtj-dtjob-operator-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    shipped = json.loads((CHART / "files" / "dashboards" / "dtjob.json").read_text())
    assert json.loads(cm["data"]["dtjob.json"]) == shipped


def test_lint_passes_with_every_monitoring_object_on() -> None:
    args = [helm(), "lint", str(CHART), "--kube-version", KUBE_VERSION.lstrip("v")]
    for value in ALL_ON:
        args += ["--set", value]
    lint = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    assert lint.returncode == 0 and "0 chart(s) failed" in lint.stdout, lint.stdout
    assert deployment(render(*ALL_ON))  # the rest of the chart is unchanged


@pytest.mark.parametrize(
    ("setting", "error"),
    [
        ("metrics.prometheusRule.queuedFor=30 minutes", "at '/metrics/prometheusRule/queuedFor'"),
        ("metrics.prometheusRule.restartsThreshold=many", "got string, want integer"),
        ("metrics.prometheusRule.restartsThreshold=0", "minimum: got 0, want 1"),
        ("metrics.serviceMonitor.enabled=yes", "got string, want boolean"),
        ("metrics.serviceMonitor.interval=fast", "at '/metrics/serviceMonitor/interval'"),
        ("metrics.grafanaDashboard.enable=true", "'enable' not allowed"),
    ],
)
def test_wrong_monitoring_values_are_refused(setting: str, error: str) -> None:
    assert error in refusal("--set", setting)
