"""The chart's monitoring objects as Prometheus itself reads them: `promtool check rules` on
the alert rules (the plain file and the PrometheusRule rendered with other thresholds), and
`promtool check config` on the scrape config the ServiceMonitor stands for
(helpers/prometheus.py, which the integration and e2e tests run Prometheus with). promtool
is the pinned build from hack/build-binaries.sh (built on first use)."""

from __future__ import annotations

from pathlib import Path

import yaml

from helpers import prometheus
from helpers.prometheus import CHART, of_kind, promtool, render_chart

RULES = CHART / "files" / "prometheus" / "dtjob-rules.yaml"


def checked(*args: str) -> str:
    proc = promtool(*args)
    assert proc.returncode == 0, f"promtool {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def test_promtool_accepts_the_rule_file_and_the_rendered_rules(tmp_path: Path) -> None:
    assert "SUCCESS: 4 rules found" in checked("check", "rules", str(RULES))
    values = ("queuedFor=2h", "restartsThreshold=10", "operatorDownFor=90s")
    objects = render_chart("dtj", "dtjob-system", *(f"metrics.prometheusRule.{v}" for v in values))
    rule = of_kind(objects, "PrometheusRule")
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    assert "SUCCESS: 4 rules found" in checked("check", "rules", str(rendered))


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    """The check above is worth something: an expression Prometheus cannot parse fails it."""
    text = RULES.read_text()
    broken = text.replace('dtjob_jobs{phase="Starting"} > 0', 'dtjob_jobs{phase="Starting" > 0')
    assert broken != text
    (tmp_path / "broken.yaml").write_text(broken)
    proc = promtool("check", "rules", str(tmp_path / "broken.yaml"))
    assert proc.returncode != 0
    assert "DTJobStartingTooLong" in proc.stdout + proc.stderr


def test_the_service_monitor_is_an_endpoints_scrape_job_named_by_its_job_label(
    tmp_path: Path,
) -> None:
    objects = render_chart("dtj", "ml-ops", "metrics.serviceMonitor.interval=15s")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    (job,) = prometheus.to_scrape_config(of_kind(objects, "ServiceMonitor"), kubeconfig)
    assert job["job_name"] == "serviceMonitor/ml-ops/dtj-dtjob-operator/0"
    timing = (job["scrape_interval"], job["scrape_timeout"], job["metrics_path"])
    assert timing == ("15s", "10s", "/metrics")
    assert job["honor_labels"] is True
    (sd,) = job["kubernetes_sd_configs"]
    assert sd == {"role": "endpoints", "kubeconfig_file": str(kubeconfig),
                  "namespaces": {"names": ["ml-ops"]}}  # fmt: skip
    keeps = {r["source_labels"][0]: r["regex"] for r in job["relabel_configs"]
             if r.get("action") == "keep"}  # fmt: skip
    assert keeps == {
        "__meta_kubernetes_service_label_app_kubernetes_io_name": r"(dtjob\-operator);true",
        "__meta_kubernetes_service_label_app_kubernetes_io_instance": "(dtj);true",
        "__meta_kubernetes_endpoint_port_name": "metrics",
    }
    # The last word on `job` is the Service's app.kubernetes.io/name: what DTJobOperatorDown
    # looks for.
    assert job["relabel_configs"][-1]["source_labels"] == [
        "__meta_kubernetes_service_label_app_kubernetes_io_name"
    ]
    config = prometheus.write_config(objects, kubeconfig, tmp_path)
    out = checked("check", "config", str(config))
    assert "SUCCESS" in out and "4 rules found" in out


def test_the_readmes_plain_scrape_config_is_the_generated_one() -> None:
    """charts/dtjob-operator/README.md shows the config for users without the Prometheus
    Operator; it must stay what the tests run (for the default release, in-cluster)."""
    readme = (CHART / "README.md").read_text().split("### Without the Prometheus Operator")[1]
    shown = yaml.safe_load(readme.split("```yaml\n")[1].split("```")[0])
    (job,) = prometheus.to_scrape_config(
        of_kind(render_chart("dtjob", "dtjob-system"), "ServiceMonitor"), Path("kubeconfig")
    )
    del job["kubernetes_sd_configs"][0]["kubeconfig_file"]  # in the cluster: its own account
    job.pop("scheme")  # http, the default
    assert shown["scrape_configs"] == [job]
