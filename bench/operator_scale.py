"""Operator scale benchmark on the local cluster (fake KWOK nodes): dtjob beside Kubeflow's
training-operator, writing bench/results/operator_scale.json:

- create -> all pods created, for a 64-pod job (p50/p90 over several jobs, one at a time,
  each after the last one's pods are gone);
- 200 jobs of 8 pods submitted at once (8 threads): time until every pod of every job
  exists and until every one is Running (and, for dtjob, until every job has a
  startTime), and the operator's CPU seconds per 1,000 pods created, to the burst's end
  (every pod Running) and to the operator's idle (no request for 3 s: Events, status) with
  the requests it sent by then (dtjob's by verb and resource, Kubeflow's by method);
- operator resident memory idle and with 1,000 jobs present (suspended, so the cluster
  holds no pods); with 1,000 running jobs x 8 pods, see bench/api_load.py;
- the burst's floor, first and with no operator running: the same 1,600 pods POSTed
  straight to the API server (bench/pod_floor.py), the control plane's own time.

Every moment a pod is seen comes from one watch of the namespace (bench/pod_watch.py), and
the burst records the control plane's CPU beside the operator's.

The same parts run for each operator in turn, on the same cluster in one run, never two
operators at once: dtjob first (its figures at the top level of the result, as before),
then Kubeflow training-operator (under "kubeflow"; a PyTorchJob of 1 Master + n-1 Workers
for a gang of n, bench/pytorchjob.py), then "ratios" (dtjob / Kubeflow, bench/scale_ratios.py).
Each operator runs with its own client defaults, recorded in the result: dtjob 200 QPS
(burst 400), Kubeflow 20 QPS (burst 30) per client and one reconcile at a time. Kubeflow's
binary is built from its Go module on first use (`hack/build-binaries.sh
kubeflow-training-operator`, KUBEFLOW_TRAINING_OPERATOR_VERSION; bench/kubeflow_operator.py).

dtjob's built-in admission is on (the default; `--admission external` measures the reconcile
alone), so every gang is admitted against the fake nodes' room first: their pod slots are
raised for the run (110 each, a kubelet's default, would queue most of the 1,600 pods).
Kubeflow admits nothing: its pods go straight to the scheduler.

Usage: python bench/operator_scale.py [--quick] [--operators dtjob,kubeflow]
                                     [--admission builtin|external]
                                     [--only PART ...] [--env DTJOB_SETTING=VALUE ...]
(--quick, --only, --env and one-operator runs print their figures and leave the results
file alone; --admission and --env apply to dtjob)
(needs the venv and Go; starts the cluster if needed, installs the CRDs, runs the operators)
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
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from kubernetes import client, config

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "tests"))

import kubeflow_operator  # noqa: E402
import pytorchjob  # noqa: E402
from cluster_tools import (  # noqa: E402
    cluster_kubeconfig,
    control_plane_pids,
    cpu_seconds,
    git_commit,
    memory_mib,
    restore_node_pod_slots,
    set_node_pod_slots,
)
from pod_floor import bench_floor  # noqa: E402
from pod_watch import PodWatch  # noqa: E402
from scale_ratios import ratio, ratios  # noqa: E402

from dtjob_operator.settings import OperatorSettings  # noqa: E402
from helpers.apimetrics import admission_passes, free_port, requests_sent  # noqa: E402
from helpers.crd import install_crd  # noqa: E402
from helpers.jobs import GROUP, JOB_LABEL, PLURAL, VERSION, JobBuilder  # noqa: E402
from helpers.kube import create_namespace, wait_for  # noqa: E402
from helpers.operator import OperatorProcess  # noqa: E402

PARTS = ("time_to_64_pods", "burst", "memory", "floor")
STARTED = "started"  # a job's state in the burst's watch of them, once it has started
OPERATORS = ("dtjob", "kubeflow")


@dataclass
class Subject:
    """One operator under test, as the parts see it: how its jobs are spelled, how its
    pods are found, and where its process and request count are read."""

    group: str
    version: str
    plural: str
    job_label: str  # the pod label that holds the job's name
    job: Callable[[str, int, bool], dict[str, Any]]  # (name, pods, suspend) -> manifest
    suspended: Callable[[dict[str, Any]], bool]  # the operator has seen the job suspended
    pid: Callable[[], int]
    requests: Callable[[], Counter[str]]  # requests its clients sent so far, by kind
    started: Callable[[dict[str, Any]], bool] | None = None  # dtjob: status.startTime
    # Counters of its own the burst reports the growth of (dtjob: its admission passes).
    counters: Callable[[], dict[str, float]] | None = None

    def create(self, api: client.ApiClient, ns: str, job: dict[str, Any]) -> None:
        resp = client.CustomObjectsApi(api).create_namespaced_custom_object(
            self.group, self.version, ns, self.plural, job, _preload_content=False
        )
        cast(Any, resp).data  # noqa: B018 - read (the connection goes back) and dropped

    def jobs(self, api: client.ApiClient, ns: str) -> list[dict[str, Any]]:
        resp = client.CustomObjectsApi(api).list_namespaced_custom_object(
            self.group, self.version, ns, self.plural, _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(cast(Any, resp).data)["items"]
        return items


def cpu_job(name: str, workers: int, suspend: bool = False) -> dict[str, Any]:
    job = JobBuilder(name).role("worker", workers, cpu="10m").spec(suspend=suspend).build()
    job["spec"]["trainer"]["batchSize"] = 8 * workers
    return job


def dtjob_subject(op: OperatorProcess, metrics_port: int) -> Subject:
    def sent() -> Counter[str]:
        return Counter(
            {f"{verb} {res}": n for (verb, res), n in requests_sent(metrics_port).items()}
        )

    def pid() -> int:
        assert op.proc is not None
        return int(op.proc.pid)

    def passes() -> dict[str, float]:
        # The admission passes of the burst, and their time (wall, in the operator).
        count, seconds = admission_passes(metrics_port)
        return {"admission_passes": count, "admission_pass_s": seconds}

    return Subject(
        GROUP, VERSION, PLURAL, JOB_LABEL, cpu_job,
        suspended=lambda job: (job.get("status") or {}).get("phase") == "Suspended",
        pid=pid, requests=sent,
        started=lambda job: bool((job.get("status") or {}).get("startTime")),
        counters=passes,
    )  # fmt: skip


def kubeflow_subject(op: kubeflow_operator.KubeflowOperator) -> Subject:
    return Subject(
        pytorchjob.GROUP, pytorchjob.VERSION, pytorchjob.PLURAL, pytorchjob.JOB_NAME_LABEL,
        lambda name, pods, suspend: pytorchjob.pytorchjob(name, pods, suspend=suspend),
        suspended=pytorchjob.is_suspended,
        pid=lambda: op.pid, requests=op.requests_sent,
    )  # fmt: skip


def delete_namespace(core: client.CoreV1Api, ns: str) -> None:
    """Delete it and wait until it is gone: its jobs and pods terminating would keep the
    operator, the scheduler and the garbage collector busy in the next part (1,600 pods
    take up to two minutes), and the next operator must not meet the last one's objects."""
    core.delete_namespace(ns)

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_for(gone, timeout=600, interval=2, what=f"namespace {ns} gone")


def wait_reconciling(api: client.ApiClient, core: client.CoreV1Api, subject: Subject) -> None:
    """Return once the operator acts on a job: a suspended one seen suspended. Neither
    operator's first figure should hold its start-up."""
    ns = create_namespace(core, "probe")
    subject.create(api, ns, subject.job("probe", 8, True))
    wait_for(lambda: all(subject.suspended(j) for j in subject.jobs(api, ns)), timeout=120,
             interval=0.2, what="the operator's first reconcile")  # fmt: skip
    delete_namespace(core, ns)


def wait_idle(subject: Subject, quiet: float = 3.0, timeout: float = 600) -> float:
    """Wait until the operator has sent no request for `quiet` seconds (by its own count);
    returns the seconds waited. An operator's work for a job outlasts its pods: Kubeflow
    sends an Event per pod and per Service, through the same 20 QPS as its creates."""
    start = time.monotonic()
    last, since = sum(subject.requests().values()), start
    while time.monotonic() - since < quiet:
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"the operator still sends requests after {timeout:.0f} s")
        time.sleep(0.5)
        if (now := sum(subject.requests().values())) != last:
            last, since = now, time.monotonic()
    return since - start


def bench_time_to_pods(
    api: client.ApiClient, core: client.CoreV1Api, subject: Subject, runs: int
) -> dict[str, Any]:
    ns = create_namespace(core, "bench64")
    times = []
    for i in range(runs):
        name = f"big-{i}"
        with PodWatch(core, ns, f"{subject.job_label}={name}") as pods:
            start = time.monotonic()
            subject.create(api, ns, subject.job(name, 64, False))
            times.append(pods.wait(lambda w: w.count() >= 64, 300, "64 pods") - start)
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                subject.group, subject.version, ns, subject.plural, name
            )
            # Each job meets an idle operator: Kubeflow's creates its 64 Services and 128
            # Events after the pods, and without this wait they took the next job's
            # request budget (2.0 s for the first job, 7-9 s for the next two at 20 QPS).
            pods.wait(lambda w: w.count() == 0, 300, "the job's pods gone")
        wait_idle(subject)
    delete_namespace(core, ns)
    times.sort()
    return {
        "runs": runs,
        "p50_s": round(statistics.median(times), 3),
        "p90_s": round(times[int(0.9 * (len(times) - 1))], 3),
        "all_s": [round(t, 3) for t in times],
    }


def burst_marks(
    subject: Subject, pods: PodWatch, jobs: PodWatch | None, total: int, start: float,
    count: int,
) -> dict[str, float]:  # fmt: skip
    """Seconds from `start` until every pod exists and until every pod is Running, and
    (dtjob, `jobs` watching them) until every job has a startTime: each the moment of the
    watch event that made it so."""
    marks: dict[str, float] = {}

    def seen(watch: PodWatch) -> None:
        if watch.count() >= total:
            marks.setdefault("all_pods_created_s", time.monotonic() - start)
        if watch.count("Running") >= total:
            marks.setdefault("all_pods_running_s", time.monotonic() - start)

    def started(watch: PodWatch) -> None:
        if watch.count(STARTED) >= count:
            marks.setdefault("all_started_s", time.monotonic() - start)

    for watch, mark in ((pods, seen), (jobs, started)):
        if watch is not None:
            with watch.changed:
                watch.on_change = mark
                mark(watch)
    deadline = start + 1800
    if jobs is not None:
        jobs.wait(lambda w: w.count(STARTED) >= count, deadline - time.monotonic(),
                  f"{count} jobs started")  # fmt: skip
    pods.wait(lambda w: w.count("Running") >= total, deadline - time.monotonic(),
              f"{total} pods Running")  # fmt: skip
    return marks


def job_watch(api: client.ApiClient, core: client.CoreV1Api, subject: Subject, ns: str) -> (
    PodWatch | None
):  # fmt: skip
    """A watch of the jobs of `ns`, each STARTED once the operator says so (dtjob: its
    status.startTime); None for an operator that has no such mark. A watch, not a list a
    second: each list of 200 jobs made the API server encode all of them again (about
    2 MB) on the very CPU the burst measures, and only for dtjob."""
    if subject.started is None:
        return None
    started, custom = subject.started, client.CustomObjectsApi(api)
    return PodWatch(
        core, ns,
        listing=lambda namespace, **query: custom.list_namespaced_custom_object(
            subject.group, subject.version, namespace, subject.plural, **query),
        state=lambda job: STARTED if started(job) else "",
    )  # fmt: skip


def bench_burst(
    api: client.ApiClient, core: client.CoreV1Api, subject: Subject, jobs: int, pods: int,
    cluster: dict[str, int],
) -> dict[str, Any]:  # fmt: skip
    """`cluster`: the control plane's processes, whose CPU the burst reports too: on a
    shared 2-core machine the API server's work for what an operator sends is most of
    where the time goes."""
    ns = create_namespace(core, "burst")
    cpu0 = cpu_seconds(subject.pid())  # from here: its start-up is not the burst's
    cluster0 = {name: cpu_seconds(pid) for name, pid in cluster.items()}
    sent0 = subject.requests()
    counters0 = subject.counters() if subject.counters else {}
    with PodWatch(core, ns) as watch, job_watch(api, core, subject, ns) or nullcontext() as job:
        start = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: subject.create(api, ns, subject.job(f"b-{i}", pods, False)),
                          range(jobs)))  # fmt: skip
        submitted = time.monotonic() - start
        marks = burst_marks(subject, watch, job, jobs * pods, start, jobs)
        cpu = cpu_seconds(subject.pid()) - cpu0  # to the last mark: the burst's end
        cluster_cpu = {n: round(cpu_seconds(pid) - cluster0[n], 1) for n, pid in cluster.items()}
        created = watch.count()
    # Then to the operator's idle: what it still sends (status, Events) is the burst's too.
    marks["operator_idle_s"] = max(marks.values()) + wait_idle(subject)
    cpu_to_idle = cpu_seconds(subject.pid()) - cpu0
    # What the operator sent for the burst (its client's rate limit bounds how fast this
    # can go: requests / QPS is the floor of the time to all pods).
    sent = subject.requests()
    sent.subtract(sent0)
    counters = subject.counters() if subject.counters else {}
    delete_namespace(core, ns)
    last = max(m for name, m in marks.items() if name != "operator_idle_s")
    return {
        "jobs": jobs,
        "pods_per_job": pods,
        "pods_created": created,
        "submit_s": round(submitted, 2),
        **{name: round(seconds, 2) for name, seconds in sorted(marks.items())},
        "jobs_per_s": round(jobs / last, 2),
        "operator_cpu_s": round(cpu, 1),
        "operator_cpu_s_per_1000_pods": round(1000 * cpu / max(created, 1), 1),
        "operator_cpu_s_to_idle": round(cpu_to_idle, 1),
        "operator_cpu_s_per_1000_pods_to_idle": round(1000 * cpu_to_idle / max(created, 1), 1),
        **{name: round(value - counters0[name], 1) for name, value in counters.items()},
        "control_plane_cpu_s": {"total": round(sum(cluster_cpu.values()), 1), **cluster_cpu},
        "operator_requests": sum(sent.values()),
        "operator_requests_per_job": round(sum(sent.values()) / jobs, 1),
        "operator_requests_by_kind": {kind: n for kind, n in sent.most_common() if n > 0},
    }


def bench_memory(
    api: client.ApiClient, core: client.CoreV1Api, subject: Subject, jobs: int
) -> dict[str, Any]:
    ns = create_namespace(core, "mem")
    idle = memory_mib(subject.pid())["rss_mib"]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: subject.create(api, ns, subject.job(f"m-{i}", 8, True)),
                      range(jobs)))  # fmt: skip
    wait_for(
        lambda: sum(1 for j in subject.jobs(api, ns) if subject.suspended(j)) == jobs,
        timeout=900,
        interval=2,
        what=f"{jobs} jobs seen suspended",
    )
    wait_idle(subject, quiet=10)  # the last reconciles done: no request for 10 s
    loaded = memory_mib(subject.pid())["rss_mib"]
    delete_namespace(core, ns)
    return {"jobs": jobs, "rss_idle_mib": round(idle, 1), "rss_with_jobs_mib": round(loaded, 1)}


def run_parts(
    api: client.ApiClient, core: client.CoreV1Api, subject: Subject, parts: list[str],
    quick: bool, cluster: dict[str, int],
) -> dict[str, Any]:  # fmt: skip
    wait_reconciling(api, core, subject)
    results: dict[str, Any] = {}
    if "time_to_64_pods" in parts:
        results["time_to_64_pods"] = bench_time_to_pods(api, core, subject, 3 if quick else 7)
    if "burst" in parts:
        results["burst"] = bench_burst(api, core, subject, 20 if quick else 200, 8, cluster)
    if "memory" in parts:
        results["memory"] = bench_memory(api, core, subject, 100 if quick else 1000)
    return results


def run_dtjob(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: Path, args: argparse.Namespace
) -> dict[str, Any]:
    install_crd(api)
    metrics_port = free_port()
    env = {
        # As the operator image runs it (Dockerfile: MALLOC_ARENA_MAX).
        "DTJOB_LOG_LEVEL": "WARNING",
        "DTJOB_ADMISSION": args.admission,
        "MALLOC_ARENA_MAX": "2",
        "DTJOB_METRICS_PORT": str(metrics_port),
        **dict(kv.split("=", 1) for kv in args.env),
    }
    op = OperatorProcess(kubeconfig, Path(tempfile.mkdtemp()) / "operator.log", env)
    defaults = OperatorSettings.model_fields
    client_settings = {
        "qps": float(env.get("DTJOB_API_QPS", defaults["api_qps"].default)),
        "burst": int(env.get("DTJOB_API_BURST", defaults["api_burst"].default)),
        "workers": int(env.get("DTJOB_WORKERS", defaults["workers"].default)),
        "api_concurrency": int(
            env.get("DTJOB_API_CONCURRENCY", defaults["api_concurrency"].default)
        ),
        "source": "settings api_qps / api_burst (DTJOB_API_QPS / DTJOB_API_BURST), one "
        "token bucket for every call but the leader Lease's; workers reconcile at once, "
        "a gang's pods are created api_concurrency at a time",
    }
    op.start()
    try:
        figures = run_parts(
            api, core, dtjob_subject(op, metrics_port), args.parts, args.quick,
            control_plane_pids(kubeconfig),
        )  # fmt: skip
    finally:
        op.stop()
    return {"admission": args.admission, **figures, "client": client_settings}


def run_kubeflow(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: Path, args: argparse.Namespace
) -> dict[str, Any]:
    install_crd(api, kubeflow_operator.crd_file())
    op = kubeflow_operator.KubeflowOperator(kubeconfig, Path(tempfile.mkdtemp()) / "kfto.log")
    op.start(core)
    try:
        figures = run_parts(
            api, core, kubeflow_subject(op), args.parts, args.quick,
            control_plane_pids(kubeconfig),
        )  # fmt: skip
    finally:
        op.stop()
    return {**kubeflow_operator.describe(), **figures}


def operator_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in OPERATORS for n in names):
        raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(OPERATORS)}")
    return [n for n in OPERATORS if n in names]  # dtjob first, whatever the order given


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller runs for a smoke check")
    parser.add_argument(
        "--operators",
        type=operator_list,
        default=list(OPERATORS),
        help="which operators to measure, one after the other (default: dtjob,kubeflow)",
    )
    parser.add_argument("--admission", choices=["builtin", "external"], default="builtin")
    parser.add_argument(
        "--only", choices=PARTS, action="append", help="run only these parts (repeatable)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a dtjob operator setting for this run (e.g. DTJOB_API_QPS=300)",
    )
    args = parser.parse_args()
    args.parts = args.only or list(PARTS)
    if "kubeflow" in args.operators:
        kubeflow_operator.bin_dir()  # built (minutes, once) before any figure is taken
    kubeconfig = cluster_kubeconfig()
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)
    former_slots = set_node_pod_slots(core, "1000")
    commit = git_commit()  # what the operator runs: the tree may change during the run
    results: dict[str, Any] = {}
    try:
        if "floor" in args.parts:  # no operator runs: the control plane's own time
            jobs = [cpu_job(f"b-{i}", 8) for i in range(20 if args.quick else 200)]
            results["floor"], ns = bench_floor(core, jobs, control_plane_pids(kubeconfig))
            delete_namespace(core, ns)
        if "dtjob" in args.operators:
            results.update(run_dtjob(api, core, kubeconfig, args))
        if "kubeflow" in args.operators:
            results["kubeflow"] = run_kubeflow(api, core, kubeconfig, args)
    finally:
        restore_node_pod_slots(core, former_slots)
    if len(args.operators) == len(OPERATORS):
        results["ratios"] = ratios(results, results["kubeflow"])
        if "floor" in results:  # the best any operator could do, against Kubeflow's
            results["ratios"]["burst_floor_all_pods_running"] = ratio(
                results["floor"]["all_pods_running_s"],
                (results["kubeflow"].get("burst") or {}).get("all_pods_running_s"),
            )
    results["operator_commit"] = commit
    results["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    results["command"] = "python bench/operator_scale.py " + shlex.join(sys.argv[1:])
    results["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "note": "local control plane, KWOK and the operator share the machine; the two "
        "operators run one after the other, never at once",
    }
    print(json.dumps(results, indent=2))
    partial = args.quick or args.only or args.env or len(args.operators) < len(OPERATORS)
    if not partial:  # a partial or off-default run is printed, not kept
        out = TOP / "bench" / "results" / "operator_scale.json"
        out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
