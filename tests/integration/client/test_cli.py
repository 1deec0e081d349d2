"""`kubectl dtj` as a user runs it (its own process, `python -m dtjob_client.cli`): output,
exit codes, and one-line errors, against the real control plane."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from integration.client.support import dtj, set_gpu_quota, write_history
from PIL import Image

from helpers.jobs import JobBuilder, exit_pod, wait_pods_running

pytestmark = [pytest.mark.integration]


def ok(kubeconfig: Path, *args: str) -> str:
    r = dtj(kubeconfig, *args)
    assert r.returncode == 0, f"kubectl dtj {' '.join(args)}: {r.stderr}"
    return r.stdout


def fails(kubeconfig: Path, *args: str) -> str:
    r = dtj(kubeconfig, *args)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr.strip()


def test_a_job_from_submit_to_plot(cluster, operator, namespace, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    kc, ns = cluster.kubeconfig, namespace
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(JobBuilder("cli-job").role("worker", 2, gpus=1).build()))
    assert ok(kc, "submit", "-f", str(manifest), "-n", ns) == (
        "distributedtrainingjob.dtjob.io/cli-job created\n"
    )
    assert "already exists" in fails(kc, "submit", "-f", str(manifest), "-n", ns)
    out = ok(kc, "wait", "cli-job", "--for=Running", "--timeout=60s", "-n", ns)
    assert "condition met: phase Running" in out
    table = ok(kc, "-n", ns, "get")  # the namespace flag before the command works too
    header, row = table.splitlines()
    assert header.split() == ["NAME", "STRATEGY", "PHASE", "STEP/TOTAL", "LOSS", "SAMPLES/S",
                              "ETA", "GPUS"]  # fmt: skip
    assert row.split()[:3] == ["cli-job", "DataParallel", "Running"] and row.split()[-1] == "2"
    assert json.loads(ok(kc, "get", "cli-job", "-o", "json", "-n", ns))["kind"] == (
        "DistributedTrainingJob"
    )
    all_ns = ok(kc, "get", "-A", "-o", "wide").splitlines()
    assert any(line.split()[:2] == [ns, "cli-job"] for line in all_ns)
    top = ok(kc, "top", "--count", "1", "-n", ns)
    assert top.startswith("1 jobs (1 Running); 2 GPUs in started gangs"), top

    assert "no loss recorded yet" in ok(kc, "plot", "cli-job", "-n", ns)
    write_history(
        cluster.core, ns, "cli-job", [[s, 2.0 / s, None, 100.0, 0.1, s] for s in (1, 2, 3, 4)]
    )
    chart = ok(kc, "plot", "cli-job", "-n", ns)
    assert chart.count("*") == 4 and "4 points" in chart
    png = tmp_path / "loss.png"
    assert ok(kc, "plot", "cli-job", "-n", ns, "--output", str(png)) == f"wrote {png} (4 points)\n"
    with Image.open(png) as image:
        assert image.format == "PNG" and len(json.loads(image.text["dtjob.points"])) == 4

    assert ok(kc, "suspend", "cli-job", "-n", ns).endswith("cli-job suspended\n")
    ok(kc, "wait", "cli-job", "--for=Suspended", "--timeout=60s", "-n", ns)
    assert "job cli-job has no pods now (phase Suspended)" in fails(kc, "logs", "cli-job", "-n", ns)
    ok(kc, "resume", "cli-job", "-n", ns)
    ok(kc, "wait", "cli-job", "--for=Running", "--timeout=60s", "-n", ns)
    first = wait_pods_running(cluster.core, ns, "cli-job", 2)[0]
    # One permanent exit fails the job, and the operator then deletes the rest of the gang:
    # touching a second pod races that deletion (a CI run got its 404).
    exit_pod(cluster.core, ns, first.metadata.name, 2)
    err = fails(kc, "wait", "cli-job", "--for=Succeeded", "--timeout=60s", "-n", ns)
    assert "is Failed and will not change, not Succeeded; last condition: Failed=True" in err
    ok(kc, "delete", "cli-job", "-n", ns)


def test_why_and_queue_name_the_quota_numbers(cluster, operator, namespace) -> None:  # type: ignore[no-untyped-def]
    kc, ns = cluster.kubeconfig, namespace
    set_gpu_quota(cluster.core, ns, 2)
    ok(kc, "submit", "--name", "holder", "--workers", "2", "--gpus", "1", "-n", ns)
    wait_pods_running(cluster.core, ns, "holder", 2)
    ok(kc, "submit", "--name", "waiter", "--workers", "1", "--gpus", "2", "-n", ns)
    ok(kc, "wait", "waiter", "--for=Queued", "--timeout=30s", "-n", ns)
    text = ""
    for _ in range(30):  # the quota controller counts the holder's pods a moment later
        text = ok(kc, "why", "waiter", "-n", ns)
        if "requests.nvidia.com/gpu 2 used of 2" in text:
            break
    assert text.startswith(f"job {ns}/waiter: Queued (WaitingForAdmission)\n"), text
    assert (
        f"queued 1st in namespace {ns}: needs 2 nvidia.com/gpu, namespace {ns} has 0 free of 2"
        in text
    )
    assert "quota gpu-quota: requests.nvidia.com/gpu 2 used of 2" in text, text
    as_json = json.loads(ok(kc, "why", "waiter", "-n", ns, "-o", "json"))
    assert as_json["queue_position"] == 1 and as_json["quotas"][0]["hard"] == "2"
    queue = ok(kc, "queue", "-n", ns).splitlines()
    assert queue[0].split() == ["POSITION", "NAME", "GPUS", "PHASE", "REASON", "AGE"]
    assert queue[1].split()[:4] == ["1", "waiter", "2", "Queued"]
    assert any(line.split()[:2] == ["gpu-quota", "requests.nvidia.com/gpu"] for line in queue)
    everywhere = ok(kc, "queue", "-A").splitlines()
    assert any(line.split()[:3] == [ns, "1", "waiter"] for line in everywhere), everywhere


def test_errors_are_one_line_with_exit_code_1(cluster, operator, namespace) -> None:  # type: ignore[no-untyped-def]
    kc, ns = cluster.kubeconfig, namespace
    for command in ("get", "why", "logs", "plot", "suspend", "resume", "wait", "delete"):
        err = fails(kc, command, "ghost", "-n", ns)
        assert err == f'error: distributedtrainingjob "ghost" not found in namespace {ns}', err
    err = fails(kc, "get", "--context", "nope")
    assert err.startswith("error: no usable Kubernetes configuration") and "nope" in err, err
    assert ok(kc, "queue", "-n", ns) == f"no jobs waiting for admission in namespace {ns}\n"
