"""A CPU example trains to Succeeded through the real Kueue on the real node: the operator
installed by the chart (its RBAC for Kueue's API included) hands the labelled job to Kueue,
starts the gang once Kueue admits it, and marks the Workload Finished at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from helpers.kueue import GROUP, VERSION, Kueue, install_crds
from helpers.realnode import E2E, RELEASE, RELEASE_NS

pytestmark = [pytest.mark.e2e]
QUEUE = "team"
PRIORITY = "kueue.x-k8s.io/priority-class"


@pytest.fixture(scope="module")
def kueue(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kueue]:
    workdir = tmp_path_factory.mktemp("kueue-e2e")
    install_crds(e2e.kubeconfig, workdir)
    e2e.kubectl("create", "namespace", "kueue-system", check=False)
    proc = Kueue(e2e.kubeconfig, workdir)
    yield proc
    proc.stop()


def cpu_queue(e2e: E2E, ns: str) -> str:
    """A default flavor, a ClusterQueue of CPU and memory, and LocalQueue QUEUE in `ns`."""
    name = f"e2e-{ns}"
    objects = [
        {"kind": "ResourceFlavor", "metadata": {"name": name}},
        {"kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": name, "resources": [{"name": "cpu", "nominalQuota": "8"},
                                            {"name": "memory", "nominalQuota": "32Gi"}]}]}]}},
        {"kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": ns},
         "spec": {"clusterQueue": name}},
    ]  # fmt: skip
    docs = [{"apiVersion": f"{GROUP}/{VERSION}", **o} for o in objects]
    e2e.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    return name


def test_a_cpu_example_trains_to_succeeded_through_kueue(
    e2e: E2E, e2e_namespace: str, kueue: Kueue
) -> None:
    ns = e2e_namespace
    cq = cpu_queue(e2e, ns)
    job = e2e.apply_example(
        "data-parallel", ns, labels={"kueue.x-k8s.io/queue-name": QUEUE}, trainer__steps=100
    )
    name = job["metadata"]["name"]
    deadline = time.monotonic() + 300
    while (status := e2e.job(ns, name).get("status", {})).get("phase") not in (
        "Succeeded", "Failed",
    ):  # fmt: skip
        assert time.monotonic() < deadline, status
        time.sleep(2)
    assert status["phase"] == "Succeeded", status
    assert status["progress"]["step"] == 100, status["progress"]
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert admitted["message"].startswith(f"admitted by Kueue in ClusterQueue {cq}"), admitted
    (workload,) = e2e.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
    finished = {c["type"]: c for c in workload["status"]["conditions"]}["Finished"]
    assert finished["status"] == "True" and finished["reason"] == "Succeeded", finished
    pods = e2e.get("pods", "-n", ns, "-l", f"dtjob.io/job-name={name}")["items"]
    assert pods and all(
        p["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == cq for p in pods
    )
    # The chart's operator started before Kueue's API existed here, or after it: either way
    # it watches the Workloads now (what wakes a job at Kueue's admission).
    logs = e2e.kubectl("logs", "-n", RELEASE_NS, "-l", f"app.kubernetes.io/instance={RELEASE}",
                       "--tail=-1")  # fmt: skip
    assert "watching the jobs' Workloads" in logs


def priority_classes(e2e: E2E, ns: str) -> tuple[str, str]:
    """Two WorkloadPriorityClasses (cluster-scoped, named after `ns`): low and high."""
    low, high = f"{ns}-low", f"{ns}-high"
    kind = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass"}
    docs = [{**kind, "metadata": {"name": n}, "value": v} for n, v in ((low, 10), (high, 1000))]
    e2e.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    return low, high


@pytest.mark.timeout(900)  # two gangs one after the other, and a restart, on the node's 2 CPUs
def test_a_job_preempted_through_kueue_resumes_from_its_checkpoint_and_never_overlaps(
    e2e: E2E, e2e_namespace: str, kueue: Kueue
) -> None:
    """Real training, preempted once by Kueue for a higher-priority job: it checkpoints on
    SIGTERM, its quota is held until its pods are gone (the preemptor's pods never run
    beside them), it is counted as one preemption with one Event, and admitted again it
    resumes from its checkpoint, never from step 0, and trains to the end."""
    ns = e2e_namespace
    name = f"e2e-{ns}"
    # Room for one job's gang (2 pods x 250m, 1Gi), so the second can only preempt.
    objects = [
        {"kind": "ResourceFlavor", "metadata": {"name": name}},
        {"kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": name, "resources": [{"name": "cpu", "nominalQuota": "500m"},
                                            {"name": "memory", "nominalQuota": "2Gi"}]}]}]}},
        {"kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": ns},
         "spec": {"clusterQueue": name}},
    ]  # fmt: skip
    e2e.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(
        [{"apiVersion": f"{GROUP}/{VERSION}", **o} for o in objects]))  # fmt: skip
    low_pc, high_pc = priority_classes(e2e, ns)
    claim = e2e.hostpath_claim(ns, Path("/tmp") / f"dtjob-{ns}-ckpt")
    queued = {"kueue.x-k8s.io/queue-name": QUEUE}
    low = e2e.apply_example(
        "data-parallel", ns, name="low", labels={**queued, PRIORITY: low_pc},
        checkpoint__claimName=claim, checkpoint__everySteps=50, trainer__steps=1500,
    )["metadata"]["name"]  # fmt: skip
    deadline = time.monotonic() + 300
    while ((e2e.job(ns, low).get("status") or {}).get("progress") or {}).get(
        "lastCheckpointStep"
    ) is None:
        assert time.monotonic() < deadline, e2e.job(ns, low).get("status")
        time.sleep(1)
    high = e2e.apply_example(
        "data-parallel", ns, name="high", labels={**queued, PRIORITY: high_pc}, trainer__steps=100
    )["metadata"]["name"]  # fmt: skip
    overlaps: list[str] = []
    checkpoint_at_stop: int | None = None
    resumed_steps: list[int] = []
    deadline = time.monotonic() + 780
    timeline: list[str] = []  # what a failure shows: seconds, phase, step, last checkpoint
    started = time.monotonic()
    while True:
        pods = e2e.get("pods", "-n", ns)["items"]
        live = {job: [p["metadata"]["name"] for p in pods
                      if p["metadata"].get("labels", {}).get("dtjob.io/job-name") == job
                      and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
                for job in (low, high)}  # fmt: skip
        running_high = [p for p in pods if p["metadata"]["name"] in live[high]
                        and p.get("status", {}).get("phase") == "Running"]  # fmt: skip
        if running_high and live[low]:
            overlaps.append(f"{[p['metadata']['name'] for p in running_high]} beside {live[low]}")
        status = e2e.job(ns, low).get("status") or {}
        progress = status.get("progress") or {}
        if status.get("phase") == "Suspended" and checkpoint_at_stop is None:
            checkpoint_at_stop = progress.get("lastCheckpointStep")
        elif checkpoint_at_stop is not None and status.get("phase") == "Running":
            resumed_steps.append(int(progress.get("step") or 0))
        timeline.append(f"{time.monotonic() - started:.0f}s {status.get('phase')} "
                        f"{progress.get('step')}/{progress.get('lastCheckpointStep')}")  # fmt: skip
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        assert time.monotonic() < deadline, (status, timeline[-40:])
        time.sleep(1)
    assert status["phase"] == "Succeeded", status
    assert (e2e.job(ns, high).get("status") or {}).get("phase") == "Succeeded"
    assert not overlaps, overlaps[:3]
    assert checkpoint_at_stop is not None, "the low job was never seen Suspended"
    assert resumed_steps and min(resumed_steps) >= checkpoint_at_stop, (
        checkpoint_at_stop, resumed_steps[:5],
    )  # fmt: skip
    assert status["progress"]["step"] == 1500
    assert status["admission"]["preemptions"] == 1, status["admission"]
    events = e2e.get("events", "-n", ns, "--field-selector",
                     f"involvedObject.name={low},reason=Preempted")["items"]  # fmt: skip
    assert sum(int(e.get("count") or 1) for e in events) == 1, events
