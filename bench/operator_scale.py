"""Operator scale benchmark on the local cluster (fake KWOK nodes), writing
bench/results/operator_scale.json:

- create -> all pods created, for a 64-pod job (p50/p90 over several jobs);
- 200 jobs of 8 pods submitted at once: time until every job has all its pods and a
  startTime, and the operator's CPU seconds per 1,000 pods created;
- operator resident memory with 1,000 jobs present (suspended, so the cluster holds no
  pods); with 1,000 running jobs x 8 pods, see bench/api_load.py.

The built-in admission is on (the default; `--admission external` measures the reconcile
alone), so every gang is admitted against the fake nodes' room first: their pod slots are
raised for the run (110 each, a kubelet's default, would queue most of the 1,600 pods).

Usage: python bench/operator_scale.py [--quick] [--admission builtin|external]
                                     [--only PART ...] [--env DTJOB_SETTING=VALUE ...]
(--quick, --only and --env runs print their figures and leave the results file alone)
(needs the venv; starts the cluster if needed, installs the CRD and runs its own operator)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "tests"))

from cluster_tools import (  # noqa: E402
    cluster_kubeconfig,
    cpu_seconds,
    git_commit,
    memory_mib,
    restore_node_pod_slots,
    set_node_pod_slots,
)

from helpers.apimetrics import admission_passes, free_port, requests_sent  # noqa: E402
from helpers.crd import install_crd  # noqa: E402
from helpers.jobs import JobBuilder, create_job, status  # noqa: E402
from helpers.kube import create_namespace, wait_for  # noqa: E402
from helpers.operator import OperatorProcess  # noqa: E402


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


def _answers(port: int) -> bool:
    try:
        requests_sent(port)
    except OSError:
        return False
    return True


def _namespace_exists(core: client.CoreV1Api, ns: str) -> bool:
    try:
        core.read_namespace(ns)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def bench_burst(
    api: client.ApiClient,
    core: client.CoreV1Api,
    op: OperatorProcess,
    metrics_port: int,
    jobs: int,
    pods: int,
) -> dict[str, Any]:
    ns = create_namespace(core, "burst")
    assert op.proc is not None
    wait_for(lambda: _answers(metrics_port), timeout=60, interval=0.5)  # a fresh operator
    cpu0 = cpu_seconds(op.proc.pid)  # from here: its start-up is not the burst's
    sent0 = requests_sent(metrics_port)
    passes0 = admission_passes(metrics_port)
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
    cpu = cpu_seconds(op.proc.pid) - cpu0
    # What the operator sent for the burst (its client's rate limit, api_qps, bounds how
    # fast this can go: requests / api_qps is the floor of all_started_s).
    sent = requests_sent(metrics_port)
    sent.subtract(sent0)
    passes = admission_passes(metrics_port)
    created = len(core.list_namespaced_pod(ns).items)
    core.delete_namespace(ns)
    # Gone before anything else is measured: 1,600 pods terminating for up to two minutes
    # kept the operator, the scheduler and the garbage collector busy in the next run.
    wait_for(lambda: not _namespace_exists(core, ns), timeout=600, interval=2)
    return {
        "jobs": jobs,
        "pods_per_job": pods,
        "pods_created": created,
        "submit_s": round(submitted, 2),
        "all_started_s": round(total, 2),
        "jobs_per_s": round(jobs / total, 2),
        "operator_cpu_s": round(cpu, 1),
        "operator_cpu_s_per_1000_pods": round(1000 * cpu / max(created, 1), 1),
        # The admission passes of the burst, and their time (wall, in the operator).
        "admission_passes": passes[0] - passes0[0],
        "admission_pass_s": round(passes[1] - passes0[1], 1),
        "operator_requests": sum(sent.values()),
        "operator_requests_per_job": round(sum(sent.values()) / jobs, 1),
        "operator_requests_by_kind": {
            f"{verb} {resource}": n for (verb, resource), n in sent.most_common() if n > 0
        },
    }


def bench_memory(
    api: client.ApiClient, core: client.CoreV1Api, op: OperatorProcess, jobs: int
) -> dict[str, Any]:
    ns = create_namespace(core, "mem")
    assert op.proc is not None
    idle = memory_mib(op.proc.pid)["rss_mib"]
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
    loaded = memory_mib(op.proc.pid)["rss_mib"]
    core.delete_namespace(ns)
    return {"jobs": jobs, "rss_idle_mib": round(idle, 1), "rss_with_jobs_mib": round(loaded, 1)}


PARTS = ("time_to_64_pods", "burst", "memory")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller runs for a smoke check")
    parser.add_argument("--admission", choices=["builtin", "external"], default="builtin")
    parser.add_argument(
        "--only", choices=PARTS, action="append", help="run only these parts (repeatable)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an operator setting for this run (e.g. DTJOB_API_QPS=300)",
    )
    args = parser.parse_args()
    parts = args.only or list(PARTS)
    kubeconfig = cluster_kubeconfig()
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)
    install_crd(api)
    former_slots = set_node_pod_slots(core, "1000")
    commit = git_commit()  # what the operator runs: the tree may change during the run
    log = Path(tempfile.mkdtemp()) / "operator.log"
    metrics_port = free_port()
    op = OperatorProcess(
        kubeconfig,
        log,
        # As the operator image runs it (Dockerfile: MALLOC_ARENA_MAX).
        {
            "DTJOB_LOG_LEVEL": "WARNING",
            "DTJOB_ADMISSION": args.admission,
            "MALLOC_ARENA_MAX": "2",
            "DTJOB_METRICS_PORT": str(metrics_port),
            **dict(kv.split("=", 1) for kv in args.env),
        },
    )
    op.start()
    try:
        results: dict[str, Any] = {"admission": args.admission}
        if "time_to_64_pods" in parts:
            results["time_to_64_pods"] = bench_time_to_pods(api, core, 3 if args.quick else 7)
        if "burst" in parts:
            jobs = 20 if args.quick else 200
            results["burst"] = bench_burst(api, core, op, metrics_port, jobs, 8)
        if "memory" in parts:
            results["memory"] = bench_memory(api, core, op, 100 if args.quick else 1000)
    finally:
        op.stop()
        restore_node_pod_slots(core, former_slots)
    results["operator_commit"] = commit
    results["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    results["command"] = "python bench/operator_scale.py " + shlex.join(sys.argv[1:])
    results["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "note": "local control plane, KWOK and the operator share the machine",
    }
    out = TOP / "bench" / "results" / "operator_scale.json"
    if args.quick or args.only or args.env:  # a partial or off-default run: printed, not kept
        print(json.dumps(results, indent=2))
        return
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
