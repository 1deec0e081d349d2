"""Operator scale benchmark on the local cluster (fake KWOK nodes), writing
bench/results/operator_scale.json:

- create -> all pods created, for a 64-pod job (p50/p90 over several jobs);
- jobs reconciled per second with 200 jobs of 8 pods submitted at once (time until every job
  has all its pods and a startTime);
- operator resident memory with 1,000 jobs present (suspended, so the cluster holds no pods).

Usage: python bench/operator_scale.py [--quick]   (needs the venv; starts the cluster if
needed, installs the CRD and runs its own operator process)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "tests"))

from helpers.crd import install_crd  # noqa: E402
from helpers.jobs import JobBuilder, create_job, status  # noqa: E402
from helpers.kube import create_namespace, wait_for  # noqa: E402
from helpers.operator import OperatorProcess  # noqa: E402


def cluster_kubeconfig() -> Path:
    up = subprocess.run([sys.executable, str(TOP / "hack" / "cluster.py"), "up"], check=False)
    if up.returncode != 0:
        raise SystemExit("cluster did not start")
    out = subprocess.run(
        [sys.executable, str(TOP / "hack" / "cluster.py"), "kubeconfig"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def cpu_job(name: str, workers: int, suspend: bool = False) -> dict[str, Any]:
    job = JobBuilder(name).role("worker", workers, cpu="10m").spec(suspend=suspend).build()
    job["spec"]["trainer"]["batchSize"] = 8 * workers
    return job


def pod_count(core: client.CoreV1Api, ns: str, name: str) -> int:
    pods = core.list_namespaced_pod(ns, label_selector=f"dtjob.io/job-name={name}")
    return len(pods.items)


def bench_time_to_pods(api: client.ApiClient, core: client.CoreV1Api, runs: int) -> dict[str, Any]:
    ns = create_namespace(core, "bench64")
    times = []
    for i in range(runs):
        name = f"big-{i}"
        start = time.monotonic()
        create_job(api, ns, cpu_job(name, 64))
        wait_for(lambda n=name: pod_count(core, ns, n) == 64, timeout=120, interval=0.05)
        times.append(time.monotonic() - start)
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "dtjob.io", "v1alpha1", ns, "distributedtrainingjobs", name
        )
    core.delete_namespace(ns)
    times.sort()
    return {
        "runs": runs,
        "p50_s": round(statistics.median(times), 3),
        "p90_s": round(times[int(0.9 * (len(times) - 1))], 3),
        "all_s": [round(t, 3) for t in times],
    }


def bench_burst(
    api: client.ApiClient, core: client.CoreV1Api, jobs: int, pods: int
) -> dict[str, Any]:
    ns = create_namespace(core, "burst")
    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: create_job(api, ns, cpu_job(f"b-{i}", pods)), range(jobs)))
    submitted = time.monotonic() - start

    def all_started() -> bool:
        items = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "dtjob.io", "v1alpha1", ns, "distributedtrainingjobs"
        )["items"]
        return sum(1 for j in items if (j.get("status") or {}).get("startTime")) == jobs

    wait_for(all_started, timeout=1200, interval=1)
    total = time.monotonic() - start
    created = len(core.list_namespaced_pod(ns).items)
    core.delete_namespace(ns)
    return {
        "jobs": jobs,
        "pods_per_job": pods,
        "pods_created": created,
        "submit_s": round(submitted, 2),
        "all_started_s": round(total, 2),
        "jobs_per_s": round(jobs / total, 2),
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_memory(
    api: client.ApiClient, core: client.CoreV1Api, op: OperatorProcess, jobs: int
) -> dict[str, Any]:
    ns = create_namespace(core, "mem")
    assert op.proc is not None
    idle = rss_mib(op.proc.pid)
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(lambda i: create_job(api, ns, cpu_job(f"m-{i}", 8, suspend=True)), range(jobs))
        )
    wait_for(
        lambda: status(api, ns, f"m-{jobs - 1}").get("phase") == "Suspended",
        timeout=600,
        interval=1,
    )
    time.sleep(10)  # let the last reconciles finish
    loaded = rss_mib(op.proc.pid)
    core.delete_namespace(ns)
    return {"jobs": jobs, "rss_idle_mib": round(idle, 1), "rss_with_jobs_mib": round(loaded, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller runs for a smoke check")
    args = parser.parse_args()
    kubeconfig = cluster_kubeconfig()
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)
    install_crd(api)
    log = Path(tempfile.mkdtemp()) / "operator.log"
    # Reconcile throughput only: 1,600 pods exceed the fake nodes' pod slots, which the
    # built-in admission would rightly queue (bench/admission.py measures admission).
    op = OperatorProcess(
        kubeconfig, log, {"DTJOB_LOG_LEVEL": "WARNING", "DTJOB_ADMISSION": "external"}
    )
    op.start()
    try:
        results = {
            "time_to_64_pods": bench_time_to_pods(api, core, 3 if args.quick else 7),
            "burst": bench_burst(api, core, 20 if args.quick else 200, 8),
            "memory": bench_memory(api, core, op, 100 if args.quick else 1000),
        }
    finally:
        op.stop()
    results["machine"] = {
        "cpus": 2,
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "note": "local control plane and operator share the machine; admission external",
    }
    out = TOP / "bench" / "results" / "operator_scale.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
