"""A real Prometheus for the tests, configured from the chart itself: the ServiceMonitor the
chart renders becomes the plain scrape config it stands for (what the Prometheus Operator
would generate from it), and the PrometheusRule's groups become its rule file. So a test
that reads the operator's metrics through it exercises the chart's own monitoring objects.

Prometheus and promtool are the pinned builds of hack/build-binaries.sh (PROMETHEUS_VERSION).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from helpers.apimetrics import free_port
from helpers.cluster import REPO
from helpers.kube import wait_for
from helpers.processes import stop_process

CHART = REPO / "charts" / "dtjob-operator"
# The ServiceMonitor fields to_scrape_config() translates; any other fails it, so a chart
# change the translation does not follow breaks the tests instead of being ignored.
MONITOR_SPEC = {"jobLabel", "selector", "namespaceSelector", "endpoints"}
ENDPOINT = {"port", "path", "interval", "scrapeTimeout", "honorLabels", "scheme"}


@functools.cache
def bin_dir() -> Path:
    """The cached pinned binaries (built on first use: minutes for Prometheus)."""
    proc = subprocess.run(
        [str(REPO / "hack" / "build-binaries.sh"), "helm", "prometheus", "promtool"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, f"building helm/prometheus/promtool failed: {proc.stderr}"
    return Path(proc.stdout.strip().splitlines()[-1])


def _pinned(name: str) -> str:
    """A version from hack/versions.env."""
    text = (REPO / "hack" / "versions.env").read_text()
    match = re.search(rf"^{name}=(\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in hack/versions.env"
    return match[1]


def render_chart(release: str, namespace: str, *sets: str) -> list[dict[str, Any]]:
    """`helm template` of the chart with the ServiceMonitor and PrometheusRule on, for the
    Kubernetes version the local cluster runs."""
    args = [str(bin_dir() / "helm"), "template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", _pinned("KUBE_VERSION")]
    for s in ("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true", *sets):
        args += ["--set", s]
    proc = subprocess.run(args, capture_output=True, text=True)
    assert proc.returncode == 0, f"helm template failed: {proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


def _meta(kind: str, label: str) -> str:
    """Kubernetes discovery's meta label of a Service label (invalid characters become `_`)."""
    return f"__meta_kubernetes_service_{kind}_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _keep_service_label(label: str, value: str) -> dict[str, Any]:
    """A selector's matchLabels entry: keep the targets whose Service has label=value."""
    sources = [_meta("label", label), _meta("labelpresent", label)]
    return {"action": "keep", "source_labels": sources, "regex": f"({re.escape(value)});true"}


# The target labels every scrape gets: where the target came from.
TARGET_LABELS = {
    "__meta_kubernetes_namespace": "namespace",
    "__meta_kubernetes_service_name": "service",
    "__meta_kubernetes_pod_name": "pod",
    "__meta_kubernetes_pod_container_name": "container",
}


def to_scrape_config(monitor: dict[str, Any], kubeconfig: Path) -> list[dict[str, Any]]:
    """The scrape configs (one per endpoint) a ServiceMonitor stands for: endpoints discovery
    in its namespaces, keeping the Services its selector matches and the endpoint port it
    names, with the target labels and job name the Prometheus Operator gives them."""
    spec, meta = monitor["spec"], monitor["metadata"]
    unknown = set(spec) - MONITOR_SPEC | set(spec["selector"]) - {"matchLabels"}
    unknown |= set(spec["namespaceSelector"]) - {"matchNames"}
    assert not unknown, f"ServiceMonitor fields this translation does not know: {unknown}"
    discovery = {
        "role": "endpoints",
        "kubeconfig_file": str(kubeconfig),
        "namespaces": {"names": spec["namespaceSelector"]["matchNames"]},
    }
    configs = []
    for i, ep in enumerate(spec["endpoints"]):
        assert not set(ep) - ENDPOINT, f"endpoint fields not translated: {set(ep) - ENDPOINT}"
        relabel = [_keep_service_label(k, v) for k, v in spec["selector"]["matchLabels"].items()]
        port = ["__meta_kubernetes_endpoint_port_name"]
        relabel.append({"action": "keep", "source_labels": port, "regex": re.escape(ep["port"])})
        # A finished pod's address may linger in the Endpoints; it is no target.
        phase = ["__meta_kubernetes_pod_phase"]
        relabel.append({"action": "drop", "source_labels": phase, "regex": "(Failed|Succeeded)"})
        relabel += [{"source_labels": [m], "target_label": t} for m, t in TARGET_LABELS.items()]
        relabel.append({"target_label": "endpoint", "replacement": ep["port"]})
        # The job is the Service's name, or its jobLabel label's value when it has one.
        relabel.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"})
        if spec.get("jobLabel"):
            source = [_meta("label", spec["jobLabel"])]
            relabel.append({"source_labels": source, "regex": "(.+)", "target_label": "job"})
        configs.append({
            "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{i}",
            "honor_labels": bool(ep.get("honorLabels", False)),
            "scrape_interval": ep["interval"],
            "scrape_timeout": ep["scrapeTimeout"],
            "metrics_path": ep.get("path", "/metrics"),
            "scheme": ep.get("scheme", "http"),
            "kubernetes_sd_configs": [discovery],
            "relabel_configs": relabel,
        })  # fmt: skip
    return configs


def write_config(objects: list[dict[str, Any]], kubeconfig: Path, directory: Path,
                 evaluation_interval: str = "2s") -> Path:  # fmt: skip
    """prometheus.yml (and rules.yaml beside it) from rendered chart objects."""
    rules = directory / "rules.yaml"
    rules.write_text(yaml.safe_dump(of_kind(objects, "PrometheusRule")["spec"]))
    config = {
        "global": {"evaluation_interval": evaluation_interval},
        "rule_files": [str(rules)],
        "scrape_configs": to_scrape_config(of_kind(objects, "ServiceMonitor"), kubeconfig),
    }
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir() / "promtool"), *args], capture_output=True, text=True)


class Prometheus:
    """`prometheus` on 127.0.0.1 at a free port, its storage and log in `directory`."""

    def __init__(self, config: Path, directory: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / "prometheus.log"
        args = [str(bin_dir() / "prometheus"), f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}"]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not become ready; see {self.log}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[str, float]:
        """An instant query: {the series' labels as JSON: value}."""
        return {
            json.dumps(s["metric"], sort_keys=True): float(s["value"][1])
            for s in self.api("query", query=expr)["result"]
        }

    def up_targets(self, job: str) -> list[dict[str, Any]]:
        """The active targets of scrape job label `job` scraped successfully."""
        targets = self.api("targets", state="active")["activeTargets"]
        return [t for t in targets if t["labels"].get("job") == job and t["health"] == "up"]

    def wait_target_up(self, job: str, timeout: float) -> dict[str, Any]:
        """The one target of `job`, once discovered and scraped successfully."""
        what = f"a target of job {job} up in Prometheus (log: {self.log})"
        (target,) = wait_for(lambda: self.up_targets(job), timeout, interval=0.5, what=what)
        return target

    def stop(self) -> None:
        stop_process(self.proc)
