"""`kubectl dtj` on the real node, as the plugin's users run it (kubectl finds
`kubectl-dtj` on PATH; here its module entry point, the same code): a CPU example submitted,
its two pods' logs followed live, a job queued behind a ResourceQuota explained in numbers,
the loss curve written as a PNG with a point per logged step, and a suspend/resume round
trip that resumes from the checkpoint."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from PIL import Image

from helpers.cluster import REPO
from helpers.realnode import E2E, place_on_real_node

STEP_LINE = re.compile(r"^\[worker-0\] step (\d+)/(\d+) ")


def dtj(e2e: E2E, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return e2e.dtj(*args, timeout=timeout)


def ok(e2e: E2E, *args: str, timeout: float = 600) -> str:
    r = dtj(e2e, *args, timeout=timeout)
    assert r.returncode == 0, f"kubectl dtj {' '.join(args)}: {r.stderr}"
    return r.stdout


def manifest(tmp_path: Path, name: str, **trainer: Any) -> Path:
    job = yaml.safe_load((REPO / "examples" / "cpu" / "data-parallel.yaml").read_text())
    job["metadata"]["name"] = name
    job["spec"]["trainer"].update(trainer)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(place_on_real_node(job, cpu="250m")))
    return path


def test_submit_follow_logs_and_plot(e2e: E2E, e2e_namespace: str, tmp_path: Path) -> None:
    ns = e2e_namespace
    ok(e2e, "submit", "-f", str(manifest(tmp_path, "cli-dp")), "-n", ns)
    ok(e2e, "wait", "cli-dp", "--for=Running", "--timeout=300s", "-n", ns)
    # Follows both pods at once until they end, which is when the job is done.
    logs = ok(e2e, "logs", "cli-dp", "--follow", "-n", ns).splitlines()
    members = {line.split("]")[0] + "]" for line in logs if line.startswith("[")}
    assert members == {"[worker-0]", "[worker-1]"}, logs[:20]
    ok(e2e, "wait", "cli-dp", "--for=Succeeded", "--timeout=300s", "-n", ns)
    logged = sorted({int(m.group(1)) for line in logs if (m := STEP_LINE.match(line))})
    assert logged and logged[-1] == 300, logs[-20:]
    png = tmp_path / "loss.png"
    out = ok(e2e, "plot", "cli-dp", "--output", str(png), "-n", ns)
    with Image.open(png) as image:
        assert image.format == "PNG"
        points = json.loads(image.text["dtjob.points"])
    assert out == f"wrote {png} ({len(logged)} points)\n"
    assert [step for step, _ in points] == logged
    chart = ok(e2e, "plot", "cli-dp", "-n", ns)
    assert chart.count("*") >= 1 and f"{len(logged)} points" in chart
    row = ok(e2e, "get", "cli-dp", "-n", ns).splitlines()[1].split()
    assert row[:4] == ["cli-dp", "DataParallel", "Succeeded", "300/300"], row


def test_why_names_the_quota_numbers(e2e: E2E, e2e_namespace: str, tmp_path: Path) -> None:
    ns = e2e_namespace
    e2e.kubectl("create", "quota", "cpu-quota", "--hard=requests.cpu=600m", "-n", ns)
    ok(e2e, "submit", "-f", str(manifest(tmp_path, "holder", steps=3000)), "-n", ns)
    ok(e2e, "wait", "holder", "--for=Running", "--timeout=300s", "-n", ns)
    ok(e2e, "submit", "-f", str(manifest(tmp_path, "waiter")), "-n", ns)
    ok(e2e, "wait", "waiter", "--for=Queued", "--timeout=60s", "-n", ns)
    text = ok(e2e, "why", "waiter", "-n", ns)
    assert text.startswith(f"job {ns}/waiter: Queued (WaitingForAdmission)"), text
    assert f"queued 1st in namespace {ns}: needs" in text and "free of 600m" in text, text
    assert re.search(r"quota cpu-quota: requests\.cpu \S+ used of 600m", text), text
    queue = ok(e2e, "queue", "-n", ns)
    assert re.search(r"^1\s+waiter\s", queue, re.M), queue
    ok(e2e, "delete", "holder", "-n", ns)
    ok(e2e, "wait", "waiter", "--for=Running", "--timeout=300s", "-n", ns)


def test_suspend_resume_round_trip(e2e: E2E, e2e_namespace: str, tmp_path: Path) -> None:
    ns = e2e_namespace
    ok(e2e, "submit", "-f", str(manifest(tmp_path, "pausable", steps=600)), "-n", ns)
    ok(e2e, "wait", "pausable", "--for=Running", "--timeout=300s", "-n", ns)
    assert ok(e2e, "suspend", "pausable", "-n", ns).endswith("pausable suspended\n")
    ok(e2e, "wait", "pausable", "--for=Suspended", "--timeout=180s", "-n", ns)
    assert e2e.job(ns, "pausable")["spec"]["suspend"] is True
    assert "Suspended=True Suspended" in ok(e2e, "why", "pausable", "-n", ns)
    ok(e2e, "resume", "pausable", "-n", ns)
    assert e2e.job(ns, "pausable")["spec"]["suspend"] is False
    ok(e2e, "wait", "pausable", "--for=Running", "--timeout=300s", "-n", ns)
    ok(e2e, "wait", "pausable", "--for=Succeeded", "--timeout=600s", "-n", ns)
    assert "Suspended=False Resumed" in ok(e2e, "why", "pausable", "-n", ns)
