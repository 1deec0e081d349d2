"""Admission benchmark, writing bench/results/admission.json:

- decision latency: one admission pass (gather + decide) with 500 queued jobs across 20
  namespaces, each with a ResourceQuota of 16 GPUs and jobs of 2 x 4 GPUs (2 admitted per
  namespace, 460 waiting), p50/p90 over repeated passes;
  * `offline`: the pure part (snapshot from API objects + decide), synthetic objects, plus
    100 busy pods on 32 nodes;
  * `cluster` (--cluster): the real pass on the local API server, with `--pods N` other
    running pods on the fake nodes (default 10,000): `live` lists everything each pass (as
    with DTJOB_INFORMERS=false), `cached` reads jobs, pods, nodes, quotas and
    PriorityClasses from the informers (caches.py), as the operator does;
- memory: Python heap held for the 500 jobs (objects + gang cache), the heap the caches
  hold for the N pods, and the process RSS.

Usage: python bench/admission.py [--cluster] [--passes N] [--pods N]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import sys
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "tests"))
sys.path.insert(0, str(TOP / "operator"))
sys.path.insert(0, str(TOP / "api"))

from dtjob_operator.admission.book import AdmissionBook  # noqa: E402
from dtjob_operator.admission.controller import AdmissionController  # noqa: E402
from dtjob_operator.admission.decide import decide  # noqa: E402
from dtjob_operator.admission.snapshot import (  # noqa: E402
    build_snapshot,
    gang_pods,
)
from dtjob_operator.metrics import OperatorMetrics  # noqa: E402
from dtjob_operator.settings import OperatorSettings  # noqa: E402

NAMESPACES, JOBS, QUOTA_GPUS = 20, 500, 16
GPU = "nvidia.com/gpu"


def job_obj(ns: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": "dtjob.io/v1alpha1",
        "kind": "DistributedTrainingJob",
        "metadata": {
            "name": f"job-{i:03d}",
            "namespace": ns,
            "uid": f"{ns}-{i}",
            "generation": 1,
            "creationTimestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        },
        "spec": {
            "strategy": {"type": "DataParallel"},
            "roles": {"worker": {"replicas": 2, "gpus": 4}},
            "trainer": {"batchSize": 48},
        },
    }


def synthetic() -> dict[str, list[dict[str, Any]]]:
    jobs = [job_obj(f"team-{n:02d}", i) for i in range(JOBS) for n in [i % NAMESPACES]]
    nodes = [
        {
            "metadata": {"name": f"node-{k:02d}", "labels": {}},
            "spec": {},
            "status": {
                "allocatable": {GPU: "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for k in range(32)
    ]
    pods = [
        {
            "metadata": {"name": f"busy-{k}", "namespace": "other"},
            "spec": {
                "nodeName": f"node-{k % 32:02d}",
                "containers": [{"resources": {"limits": {GPU: "1"}}}],
            },
            "status": {"phase": "Running"},
        }
        for k in range(100)
    ]
    quotas = [
        {
            "metadata": {"name": "gpus", "namespace": f"team-{n:02d}"},
            "spec": {"hard": {f"requests.{GPU}": str(QUOTA_GPUS)}},
            "status": {"used": {f"requests.{GPU}": "0"}},
        }
        for n in range(NAMESPACES)
    ]
    return {"jobs": jobs, "nodes": nodes, "pods": pods, "quotas": quotas}


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p90_ms": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 2),
        "max_ms": round(1000 * ordered[-1], 2),
        "passes": len(ordered),
    }


def offline(passes: int) -> dict[str, Any]:
    result = timed_passes(passes)
    tracemalloc.start()  # slows Python down: heap measured in a run of its own
    timed_passes(1)
    _, heap = tracemalloc.get_traced_memory()  # peak: objects, gangs and one pass
    tracemalloc.stop()
    result["python_heap_mib_holding_jobs"] = round(heap / 2**20, 1)
    return result


def timed_passes(passes: int) -> dict[str, Any]:
    settings = OperatorSettings()
    objs = synthetic()
    book = AdmissionBook()
    cache: dict[str, Any] = {}

    def gang_of(job: Any) -> Any:
        uid = job["metadata"]["uid"]
        if uid not in cache:
            cache[uid] = gang_pods(job, settings)
        return cache[uid]

    def one_pass() -> Any:
        snap = build_snapshot(
            jobs=objs["jobs"], pods=objs["pods"], nodes=objs["nodes"], quotas=objs["quotas"],
            priority_classes=[], gang_of=gang_of, admitted=book.admitted,
            not_before=lambda j: None, now=datetime.now(UTC),
        )  # fmt: skip
        decisions = decide(snap, preemption=True)
        book.record(decisions, book.epoch())
        return decisions

    t0 = time.perf_counter()
    first = one_pass()  # cold: builds every gang once
    cold = time.perf_counter() - t0
    samples = []
    for _ in range(passes):
        t0 = time.perf_counter()
        decisions = one_pass()
        samples.append(time.perf_counter() - t0)
    waiting = sum(1 for v in decisions.verdicts.values() if not v.admit)
    return {
        "jobs": JOBS,
        "namespaces": NAMESPACES,
        "admitted_first_pass": len(first.admitted),
        "waiting": waiting,
        "cold_pass_ms": round(1000 * cold, 1),
        "warm_pass": percentiles(samples),
        "per_job_decision_us": round(1e6 * statistics.median(samples) / JOBS, 1),
    }


def timed_gathers(controller: Any, passes: int) -> dict[str, Any]:
    controller.run_pass()
    samples, gathers = [], []
    for _ in range(passes):
        t0 = time.perf_counter()
        snap = controller.gather()
        t1 = time.perf_counter()
        decide(snap, preemption=True)
        samples.append(time.perf_counter() - t0)
        gathers.append(t1 - t0)
    return {"pass": percentiles(samples), "gather_only": percentiles(gathers)}


def create_busy_pods(core: Any, count: int) -> str:
    """`count` running pods of some other workload, bound to the fake nodes round-robin
    (no scheduler needed), in a namespace of their own; returns it."""
    from concurrent.futures import ThreadPoolExecutor

    from helpers.kube import KWOK_NODE, create_namespace

    ns = create_namespace(core, "bench-busy")
    nodes = [
        n.metadata.name
        for n in core.list_node().items
        if (n.metadata.annotations or {}).get(KWOK_NODE) is not None
    ]

    def one(i: int) -> None:
        core.create_namespaced_pod(ns, {
            "metadata": {"name": f"busy-{i:05d}", "labels": {"app": "busy"}},
            "spec": {
                "nodeName": nodes[i % len(nodes)],
                "containers": [{"name": "c", "image": "busy",
                                "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}],
                "tolerations": [{"operator": "Exists"}],
            },
        })  # fmt: skip

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))
    return ns


def on_cluster(passes: int, pods: int) -> dict[str, Any]:
    import subprocess

    from kubernetes import client, config

    from helpers.crd import install_crd
    from helpers.jobs import create_job
    from helpers.kube import create_namespace

    out = subprocess.run(
        [sys.executable, str(TOP / "hack" / "cluster.py"), "kubeconfig"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    kubeconfig = Path(out.stdout.strip())
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)
    install_crd(api)
    namespaces = [create_namespace(core, "bench-adm") for _ in range(NAMESPACES)]
    namespaces_made: list[str] = []
    try:
        for ns in namespaces:
            core.create_namespaced_resource_quota(
                ns, {"metadata": {"name": "gpus"},
                     "spec": {"hard": {f"requests.{GPU}": str(QUOTA_GPUS)}}},
            )  # fmt: skip
        for i in range(JOBS):
            job = job_obj(namespaces[i % NAMESPACES], i)
            for key in ("uid", "generation", "creationTimestamp", "namespace"):
                job["metadata"].pop(key)
            create_job(api, namespaces[i % NAMESPACES], job)
        busy = create_busy_pods(core, pods)
        namespaces_made = [busy]
        from dtjob_operator import kubeconfig as operator_kubeconfig
        from dtjob_operator.api_client import GuardedApiClient
        from dtjob_operator.caches import Caches
        from dtjob_operator.k8s import KubeApi

        settings = OperatorSettings(namespaces=namespaces)
        access = operator_kubeconfig.from_kubeconfig([kubeconfig])
        kube = KubeApi(GuardedApiClient(access, (5.0, 30.0)))
        result: dict[str, Any] = {"other_running_pods": pods}
        live = AdmissionController(
            kube, settings, OperatorMetrics(), AdmissionBook(), enqueue=lambda key: None
        )
        result["live"] = timed_gathers(live, passes)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        caches = Caches(kube, settings, lambda key: None, lambda: None)
        t0 = time.perf_counter()
        caches.start()
        while not caches.synced():
            time.sleep(0.05)
        result["cache_first_sync_s"] = round(time.perf_counter() - t0, 2)
        # An informer is synced as soon as its store is in, while its thread still holds the
        # list it parsed (and reports its objects): measure once that is gone.
        time.sleep(5)
        gc.collect()
        result["cache_heap_mib"] = round((tracemalloc.get_traced_memory()[0] - before) / 2**20, 1)
        result["cached_pods"] = len(caches.list_all_pods())
        tracemalloc.stop()
        cached = AdmissionController(
            kube, settings, OperatorMetrics(), AdmissionBook(), enqueue=lambda key: None,
            reads=caches,
        )  # fmt: skip
        result["cached"] = timed_gathers(cached, passes)
        caches.stop()
        return result
    finally:
        for ns in namespaces + namespaces_made:
            core.delete_namespace(ns)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", action="store_true", help="also measure on the cluster")
    parser.add_argument("--passes", type=int, default=30)
    parser.add_argument("--pods", type=int, default=10_000, help="other running pods")
    args = parser.parse_args()
    result: dict[str, Any] = {"offline": offline(args.passes)}
    if args.cluster:
        result["cluster"] = on_cluster(args.passes, args.pods)
    result["process_max_rss_mib"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
    )
    out = TOP / "bench" / "results" / "admission.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
