"""The operator's API load at rest, writing bench/results/api_load.json:

N running jobs x P pods on the local cluster's fake (KWOK) nodes, nothing changing. The
figure is the kube-apiserver's own `apiserver_request_total` (WATCH excluded: an open watch
is one request however long it lasts), counted over a window with the operator running,
minus the same count over a window of the same length with the operator stopped (what the
controller-manager, the scheduler and KWOK do on their own), by verb and resource. The
metric has no client label, so the subtraction is what isolates the operator; the two
windows are back to back in the same run. The operator's CPU time over its window and its
resident memory at the end of it (and at its peak, while the gangs were created) are
recorded too.

Usage: python bench/api_load.py [--jobs N] [--pods-per-job P] [--window S]
                                [--admission builtin|external] [--label NAME]
The result is stored under `--label` (default "latest") in the JSON file, next to earlier
labels (e.g. "baseline", measured before a change), with the command that repeats it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
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

from helpers.apimetrics import per_second, window  # noqa: E402
from helpers.crd import install_crd  # noqa: E402
from helpers.jobs import GROUP, PLURAL, VERSION, JobBuilder, create_job  # noqa: E402
from helpers.kube import create_namespace, wait_for  # noqa: E402
from helpers.operator import OperatorProcess  # noqa: E402

RESULTS = TOP / "bench" / "results" / "api_load.json"


def running_jobs(api: client.ApiClient, ns: str) -> int:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)[
        "items"
    ]
    return sum(1 for j in items if (j.get("status") or {}).get("phase") == "Running")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    kubeconfig = cluster_kubeconfig()
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)
    install_crd(api)
    # 110 pod slots per fake node (a kubelet's default) would hold few of N x P pods.
    nodes = len(core.list_node(label_selector="type=kwok").items)
    slots = str(max(110, -(-args.jobs * args.pods_per_job * 5 // 4 // max(nodes, 1))))
    former_slots = set_node_pod_slots(core, slots)
    log = Path(tempfile.mkdtemp()) / "operator.log"
    # As the operator image runs it (Dockerfile: MALLOC_ARENA_MAX).
    env = {"DTJOB_LOG_LEVEL": "WARNING", "DTJOB_ADMISSION": args.admission,
           "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    op = OperatorProcess(kubeconfig, log, env)
    ns = create_namespace(core, "apiload")
    op.start()
    try:
        start = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: create_job(api, ns, job(f"r-{i}", args.pods_per_job)),
                          range(args.jobs)))  # fmt: skip
        wait_for(lambda: running_jobs(api, ns) == args.jobs, timeout=1800, interval=5,
                 what=f"{args.jobs} running jobs")  # fmt: skip
        to_running = time.monotonic() - start
        time.sleep(args.settle)  # the last status writes and admission passes
        assert op.proc is not None
        cpu0 = cpu_seconds(op.proc.pid)
        with_operator = window(api, args.window)
        cpu = cpu_seconds(op.proc.pid) - cpu0
        memory = memory_mib(op.proc.pid)
        op.stop()
        time.sleep(5)  # its last calls are done and counted before the second window
        without = window(api, args.window)
    finally:
        op.stop()
        core.delete_namespace(ns)
        restore_node_pod_slots(core, former_slots)
    caused = Counter(with_operator)
    caused.subtract(without)
    total = sum(caused.values()) / args.window
    return {
        "jobs": args.jobs,
        "pods_per_job": args.pods_per_job,
        "admission": args.admission,
        "window_s": args.window,
        "operator_requests_per_s": round(total, 2),
        "operator_requests_per_s_per_job": round(total / args.jobs, 3),
        "operator_cpu_percent_of_a_core": round(100 * cpu / args.window, 1),
        "operator_memory_at_rest": memory,
        "by_request_per_s": per_second(caused, args.window),
        "with_operator_requests_per_s": round(sum(with_operator.values()) / args.window, 2),
        "without_operator_requests_per_s": round(sum(without.values()) / args.window, 2),
        "seconds_until_all_running": round(to_running, 1),
    }


def job(name: str, pods: int) -> dict[str, Any]:
    built = JobBuilder(name).role("worker", pods, cpu="10m").build()
    built["spec"]["trainer"]["batchSize"] = 8 * pods
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="running jobs")
    parser.add_argument("--pods-per-job", type=int, default=4)
    parser.add_argument("--window", type=float, default=60, help="seconds per count window")
    parser.add_argument("--settle", type=float, default=20, help="seconds before counting")
    parser.add_argument("--admission", choices=["builtin", "external"], default="builtin")
    parser.add_argument("--label", default="latest", help="key of this run in the results")
    args = parser.parse_args()
    commit = git_commit()  # what the operator runs: the tree may change during the run
    result = measure(args)
    result["operator_commit"] = commit
    result["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result["command"] = "python bench/api_load.py " + shlex.join(sys.argv[1:])
    result["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "note": "local control plane, KWOK and the operator share the machine",
    }
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[args.label] = result
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
