"""Time from applying a job to its whole gang created: through the real Kueue vs through
dtjob's built-in admission, writing bench/results/kueue_admission.json.

On the local cluster's fake (KWOK) GPU nodes, with the real Kueue (tests/helpers/kueue.py)
and the operator (admission "builtin": labelled jobs go to Kueue, the others to the
built-in admission) running as host processes. Jobs of 2 pods x 1 GPU are created one at a
time, alternating Kueue and built-in, into an empty ClusterQueue of ample quota; each
sample is the seconds from the create call's return until the job's every pod exists
(polled every 50 ms), then the job is deleted and its pods are waited out. The Kueue path
is: operator creates the Workload, Kueue admits it, the Workload watch wakes the job, the
operator creates the gang.

Usage: python bench/kueue_admission.py [--jobs N] [--label NAME]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "tests"))

from cluster_tools import cluster_kubeconfig, record  # noqa: E402

from helpers.crd import install_crd  # noqa: E402
from helpers.jobs import GROUP as DTJOB_GROUP  # noqa: E402
from helpers.jobs import JOB_LABEL, PLURAL, JobBuilder, create_job  # noqa: E402
from helpers.jobs import VERSION as DTJOB_VERSION  # noqa: E402
from helpers.kube import create_namespace, wait_for  # noqa: E402
from helpers.kueue import GROUP, VERSION, Kueue, install_crds  # noqa: E402
from helpers.operator import OperatorProcess  # noqa: E402

RESULTS = TOP / "bench" / "results" / "kueue_admission.json"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def queues(api: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(api)
    name = f"bench-{ns}"
    custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
        "metadata": {"name": name}})  # fmt: skip
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": name, "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]}})  # fmt: skip
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
        "metadata": {"name": "bench", "namespace": ns},
        "spec": {"clusterQueue": name}})  # fmt: skip


def gang_created(core: client.CoreV1Api, ns: str, name: str, pods: int) -> bool:
    found = core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name}").items
    return len([p for p in found if p.metadata.deletion_timestamp is None]) == pods


def one(api: client.ApiClient, ns: str, name: str, kueue: bool) -> float:
    core = client.CoreV1Api(api)
    job = JobBuilder(name).role("worker", 2, gpus=1).build()
    if kueue:
        job["metadata"]["labels"] = {QUEUE_LABEL: "bench"}
    create_job(api, ns, job)
    start = time.monotonic()
    wait_for(lambda: gang_created(core, ns, name, 2), 120, interval=0.05, what=f"{name}'s gang")
    took = time.monotonic() - start
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        DTJOB_GROUP, DTJOB_VERSION, ns, PLURAL, name
    )
    wait_for(lambda: not core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name}").items,
             120, what=f"{name}'s pods gone")  # fmt: skip
    return took


def summary(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    return {
        "samples": len(ordered),
        "p50_s": round(statistics.median(ordered), 3),
        "p90_s": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "max_s": round(ordered[-1], 3),
        "all_s": [round(s, 3) for s in samples],
    }


def measure(jobs: int) -> dict[str, Any]:
    kubeconfig = cluster_kubeconfig()
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)
    install_crd(api)
    workdir = Path(tempfile.mkdtemp())
    install_crds(kubeconfig, workdir)
    try:
        core.create_namespace({"metadata": {"name": "kueue-system"}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    kueue = Kueue(kubeconfig, workdir)
    env = {"DTJOB_LOG_LEVEL": "WARNING", "DTJOB_TRAINER_IMAGE": "dtjob/trainer:bench"}
    operator = OperatorProcess(kubeconfig, workdir / "operator.log", env)
    ns = create_namespace(core, "kueuebench")
    times: dict[str, list[float]] = {"kueue": [], "builtin": []}
    try:
        queues(api, ns)
        operator.start()
        one(api, ns, "warm-up", kueue=True)  # first Workload, first watch events
        for i in range(jobs):
            for path in ("kueue", "builtin"):
                times[path].append(one(api, ns, f"{path}-{i}", kueue=path == "kueue"))
    finally:
        operator.stop()
        kueue.stop()
        core.delete_namespace(ns)
    return {"jobs_per_path": jobs, "pods_per_job": 2,
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
        "kueue_admission.py",
        "local control plane, KWOK, Kueue and the operator share the machine",
    )


if __name__ == "__main__":
    main()
