"""The SDK against the real control plane: submit, wait (watch-based), history, why with
quota numbers, suspend/resume."""

from __future__ import annotations

import threading
import time

import pytest
from integration.client.support import set_gpu_quota, write_history

from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_client import Client, InvalidJob, JobEndedInOtherPhase, JobNotFound, WaitTimeout
from helpers.jobs import JobBuilder, exit_pod, job_pods, wait_pods_running
from helpers.kube import wait_for

pytestmark = [pytest.mark.integration]


def sdk(cluster, ns: str) -> Client:  # type: ignore[no-untyped-def]
    return Client(namespace=ns, kubeconfig=cluster.kubeconfig)


def test_submit_wait_and_read_the_history(cluster, operator, namespace) -> None:  # type: ignore[no-untyped-def]
    c = sdk(cluster, namespace)
    spec = DistributedTrainingJobSpec.model_validate(
        {"strategy": {"type": "DataParallel"}, "roles": {"worker": {"replicas": 2, "gpus": 1}},
         "trainer": {"batchSize": 48}}
    )  # fmt: skip
    job = c.submit(spec, name="sdk-job")
    assert job.namespace == namespace and job.spec is not None
    assert c.progress_history("sdk-job").points == ()  # no ConfigMap yet: an older job
    assert c.wait("sdk-job", "Running", timeout=60).status.phase == "Running"
    assert [j.name for j in c.list()] == ["sdk-job"]
    # A watch, not a sleep loop: the wait returns as soon as the pods end, on another thread.
    for pod in wait_pods_running(cluster.core, namespace, "sdk-job", 2):
        exit_pod(cluster.core, namespace, pod.metadata.name, 0)
    done = c.wait("sdk-job", {"Succeeded"}, timeout=60)
    assert done.status.phase == "Succeeded"
    write_history(cluster.core, namespace, "sdk-job",
                  [[10, 2.1, None, 800.0, 0.05, 1.0], [20, 1.4, None, 810.5, 0.05, 2.0],
                   [30, 0.9, 0.91, None, 0.05, 3.0]])  # fmt: skip
    history = c.progress_history("sdk-job")
    assert history.losses == [(10, 2.1), (20, 1.4), (30, 0.9)]
    assert history.points[-1].accuracy == 0.91 and history.stride == 1
    with pytest.raises(JobNotFound, match="not found in namespace"):
        c.progress_history("no-such-job")


def test_wait_says_why_it_gave_up(cluster, operator, namespace) -> None:  # type: ignore[no-untyped-def]
    c = sdk(cluster, namespace)
    c.submit(JobBuilder("fails").role("worker", 1, gpus=1).build())
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"fails is \w+ after 2s, not Succeeded"):
        c.wait("fails", "Succeeded", timeout=2)
    assert time.monotonic() - started < 10
    pods = wait_pods_running(cluster.core, namespace, "fails", 1)
    # 3: a permanent failure (the bundled trainer's 2 is a config error: InvalidSpec).
    threading.Timer(1.0, exit_pod, (cluster.core, namespace, pods[0].metadata.name, 3)).start()
    with pytest.raises(JobEndedInOtherPhase) as err:
        c.wait("fails", "Succeeded", timeout=60)
    assert err.value.phase == "Failed"
    assert "last condition: Failed=True PodFailedPermanent" in str(err.value), err.value


def test_invalid_jobs_are_refused_before_the_server_sees_them(cluster, operator, namespace) -> None:  # type: ignore[no-untyped-def]
    c = sdk(cluster, namespace)
    with pytest.raises(InvalidJob, match=r"spec\.roles\.ps"):
        c.submit(JobBuilder("bad").role("worker", 1).role("ps", 1).build())
    assert c.list() == []


def test_why_names_the_queue_position_and_quota_numbers(cluster, operator, namespace) -> None:  # type: ignore[no-untyped-def]
    core = cluster.core
    set_gpu_quota(core, namespace, 4)
    c = sdk(cluster, namespace)
    c.submit(JobBuilder("first").role("worker", 2, gpus=2).build())
    wait_pods_running(core, namespace, "first", 2)
    c.submit(JobBuilder("second").role("worker", 1, gpus=4).build())
    c.wait("second", "Queued", timeout=30)

    def quota_counted() -> object:
        why = c.why("second")
        used = {q.resource: q.used for q in why.quotas}
        return (
            why if why.queue_position == 1 and used.get("requests.nvidia.com/gpu") == "4" else None
        )

    why = wait_for(quota_counted, timeout=30, what="queue position and quota use of job second")
    assert why.phase == "Queued" and why.reason == "WaitingForAdmission"
    assert why.admission is not None and why.admission.status == "False"
    assert "needs 4 nvidia.com/gpu" in why.admission.message
    assert f"namespace {namespace} has 0 free of 4" in why.admission.message
    assert [(q.quota, q.hard) for q in why.quotas] == [("gpu-quota", "4")]
    assert any(e.reason == "WaitingForAdmission" for e in why.events)
    assert [j.name for j in c.queue().jobs] == ["second"]


def test_suspend_and_resume_round_trip(cluster, operator, namespace) -> None:  # type: ignore[no-untyped-def]
    c = sdk(cluster, namespace)
    c.submit(JobBuilder("pausable").role("worker", 2, gpus=1).build())
    c.wait("pausable", "Running", timeout=60)
    assert c.suspend("pausable").spec.suspend is True  # type: ignore[union-attr]
    c.wait("pausable", "Suspended", timeout=60)
    wait_for(lambda: not job_pods(cluster.core, namespace, "pausable"), what="pods gone")
    assert c.resume("pausable").spec.suspend is False  # type: ignore[union-attr]
    assert c.wait("pausable", "Running", timeout=60).status.phase == "Running"
    c.delete("pausable")
    with pytest.raises(JobNotFound):
        c.suspend("pausable")
