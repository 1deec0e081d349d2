"""The burst's floor: the same 1,600 pods with no operator at all (bench/operator_scale.py).

The pods dtjob would create for the burst's 200 jobs (its own builders, 8 per job) are POSTed
straight to the API server, 32 at once, and timed to all Running with the control plane's
CPU, as the burst is. What is left is the control plane's own work: the scheduler binds at
most its client's 50 requests a second (kube-scheduler's default QPS, burst 100) and KWOK
marks each pod Running, on the same 2 cores. No operator can start the burst faster than
this; the burst's figure minus this one is what an operator adds.

The pods keep everything but their owner (the job does not exist) and their
ServiceAccount (nor does it); their ConfigMap volume is never mounted on a KWOK node.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cluster_tools import cpu_seconds
from kubernetes import client
from pod_watch import PodWatch

from dtjob_operator.builders.children import build_pods
from dtjob_operator.builders.job import Job
from dtjob_operator.settings import OperatorSettings
from helpers.kube import create_namespace

CONCURRENCY = 32


def bare_pods(job: dict[str, Any], ns: str) -> list[dict[str, Any]]:
    """dtjob's gang for `job`, as it would create it, less the owner and ServiceAccount."""
    job = {**job, "metadata": {**job["metadata"], "namespace": ns, "uid": "none"}}
    pods = build_pods(Job.from_object(job), 0, OperatorSettings())
    for pod in pods:
        pod["metadata"].pop("ownerReferences", None)
        pod["spec"].pop("serviceAccountName", None)
    return pods


def bench_floor(
    core: client.CoreV1Api, jobs: list[dict[str, Any]], cluster: dict[str, int]
) -> tuple[dict[str, Any], str]:
    """Figures of the floor run and the namespace it ran in (for the caller to delete)."""
    ns = create_namespace(core, "floor")
    pods = [pod for job in jobs for pod in bare_pods(job, ns)]
    cpu0 = {name: cpu_seconds(pid) for name, pid in cluster.items()}
    with PodWatch(core, ns) as watch:
        start = time.monotonic()
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(lambda pod: core.create_namespaced_pod(ns, pod, _preload_content=False)
                          .data, pods))  # fmt: skip
        created = time.monotonic() - start
        running = watch.wait(
            lambda w: w.count("Running") >= len(pods), 1800, f"{len(pods)} pods Running"
        )
    cpu = {name: round(cpu_seconds(pid) - cpu0[name], 1) for name, pid in cluster.items()}
    return {
        "pods": len(pods),
        "concurrency": CONCURRENCY,
        "all_pods_created_s": round(created, 2),
        "all_pods_running_s": round(running - start, 2),
        "control_plane_cpu_s": {"total": round(sum(cpu.values()), 1), **cpu},
    }, ns
