"""Time from applying a job on a MultiKueue manager to its whole gang created on a worker,
beside the same job through one cluster's Kueue; writes bench/results/multikueue_dispatch.json.

The manager is the local cluster (`make cluster-up`, or started here), with the real Kueue
configured for MultiKueue and the operator; one worker is a second control plane with one
fake 8-GPU node, its own Kueue and operator (tests/helpers/multikueue.py, as the
integration tests set it up). Jobs of 2 pods x 1 GPU are applied one at a time,
alternating: into a LocalQueue whose ClusterQueue runs the MultiKueue check (the gang is
counted on the worker), and into one of the manager's own (counted on the manager). Each
sample is the seconds from the create call's return until every pod of the job exists
(polled every 50 ms); the job is then deleted and its pods waited out.

The MultiKueue path: manager operator makes the Workload, manager Kueue reserves quota,
MultiKueue copies the Workload to the worker, the worker's Kueue admits it, MultiKueue
creates the job copy, the worker's operator adopts the Workload and creates the gang.

Usage: python bench/multikueue_dispatch.py [--jobs N] [--label NAME]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "tests"))

from cluster_tools import cluster_kubeconfig, record  # noqa: E402
from kueue_admission import gang_created, summary  # noqa: E402

from helpers.crd import install_crd  # noqa: E402
from helpers.jobs import JOB_LABEL, JobBuilder, create_job, delete_job  # noqa: E402
from helpers.kube import create_namespace, wait_for  # noqa: E402
from helpers.kueue import Kueue, install_crds  # noqa: E402
from helpers.multikueue import (  # noqa: E402
    DTJ_FRAMEWORK,
    KUEUE_NAMESPACE,
    connect_workers,
    disconnect_workers,
    ensure_namespace,
    gpu_queue,
    local_queue,
    start_worker,
    worker_stack,
)
from helpers.operator import OperatorProcess  # noqa: E402

RESULTS = TOP / "bench" / "results" / "multikueue_dispatch.json"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_BY = "kueue.x-k8s.io/multikueue"
ENV = {"DTJOB_LOG_LEVEL": "WARNING", "DTJOB_TRAINER_IMAGE": "dtjob/trainer:bench"}


def one(manager: client.ApiClient, runs_on: client.ApiClient, ns: str, name: str,
        far: bool) -> float:  # fmt: skip
    job = JobBuilder(name).role("worker", 2, gpus=1).build()
    job["metadata"]["labels"] = {QUEUE_LABEL: "far" if far else "near"}
    if far:
        job["spec"]["managedBy"] = MANAGED_BY
    core = client.CoreV1Api(runs_on)
    create_job(manager, ns, job)
    start = time.monotonic()
    wait_for(lambda: gang_created(core, ns, name, 2), 180, interval=0.05, what=f"{name}'s gang")
    took = time.monotonic() - start
    delete_job(manager, ns, name)
    wait_for(lambda: not core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name}").items,
             180, what=f"{name}'s pods gone")  # fmt: skip
    return took


def measure(jobs: int) -> dict[str, Any]:
    kubeconfig = cluster_kubeconfig()
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)
    workdir = Path(tempfile.mkdtemp())
    worker = start_worker("bench-worker", 0, workdir)
    parts: list[Any] = []
    check = f"bench-dispatch-{os.getpid()}"
    times: dict[str, list[float]] = {"multikueue": [], "one_cluster_kueue": []}
    try:
        (workdir / "worker").mkdir()
        worker_stack(worker, workdir / "worker", ENV)
        install_crd(api)
        install_crds(kubeconfig, workdir)
        ensure_namespace(core, KUEUE_NAMESPACE)
        parts.append(Kueue(kubeconfig, workdir, multikueue_kinds=[DTJ_FRAMEWORK]))
        operator = OperatorProcess(kubeconfig, workdir / "operator.log", ENV)
        operator.start()
        parts.append(operator)
        connect_workers(api, [worker], check)
        ns = create_namespace(core, "mkbench")
        ensure_namespace(worker.core, ns)
        custom = client.CustomObjectsApi(api)
        gpu_queue(custom, f"{ns}-far", 16, checks=[check])
        local_queue(custom, ns, "far", f"{ns}-far")
        gpu_queue(custom, f"{ns}-near", 16)
        local_queue(custom, ns, "near", f"{ns}-near")
        gpu_queue(worker.custom, f"{ns}-far", 16)
        local_queue(worker.custom, ns, "far", f"{ns}-far")
        one(api, worker.api, ns, "warm-up", far=True)  # first dispatch, first watches
        for i in range(jobs):
            times["multikueue"].append(one(api, worker.api, ns, f"far-{i}", far=True))
            times["one_cluster_kueue"].append(one(api, api, ns, f"near-{i}", far=False))
    finally:
        disconnect_workers(api, [worker], check)
        for part in reversed(parts):
            part.stop()
        worker.down()
    return {"jobs_per_path": jobs, "pods_per_job": 2, "workers": 1,
            **{path: summary(samples) for path, samples in times.items()}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs per path")
    parser.add_argument("--label", default="latest", help="key of this run in the results")
    args = parser.parse_args()
    record(
        RESULTS,
        args.label,
        measure(args.jobs),
        "multikueue_dispatch.py",
        "two local control planes, two Kueues and two operators share the machine",
    )


if __name__ == "__main__":
    main()
