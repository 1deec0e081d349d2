"""The operator drives jobs through their lifecycle on the real control plane; KWOK plays
the kubelet, so pod phases and exit codes are chosen by the test."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from helpers.jobs import (
    JobBuilder,
    create_job,
    env_of,
    exit_pod,
    get_job,
    job_pods,
    patch_job,
    status,
    wait_phase,
    wait_pods_running,
)
from helpers.kube import (
    create_namespace,
    delete_namespace_now,
    events_for,
    unique,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]


def ddp_job(name: str, workers: int = 2, **policy: object) -> dict[str, object]:
    return (
        JobBuilder(name)
        .strategy("DataParallel")
        .role("worker", workers, gpus=1)
        .run_policy(**policy)
        .build()
    )


def test_job_creates_gang_with_env_and_reaches_running_then_succeeded(cluster, namespace) -> None:
    core = cluster.core
    name = unique("ddp")
    create_job(cluster.api, namespace, ddp_job(name, workers=3))
    pods = wait_pods_running(core, namespace, name, 3)

    assert [p.metadata.name for p in pods] == [f"{name}-worker-{i}" for i in range(3)]
    for i, pod in enumerate(pods):
        env = env_of(pod)
        assert env["RANK"] == str(i)
        assert env["WORLD_SIZE"] == "3"
        assert env["MASTER_ADDR"] == f"{name}-worker-0.{name}.{namespace}.svc"
        assert pod.metadata.labels["dtjob.io/role"] == "worker"
        assert pod.metadata.labels["dtjob.io/role-index"] == str(i)
        assert pod.spec.hostname == pod.metadata.name and pod.spec.subdomain == name
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
        assert pod.metadata.owner_references[0].kind == "DistributedTrainingJob"
    svc = core.read_namespaced_service(name, namespace)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses

    st = wait_phase(cluster.api, namespace, name, "Running")
    assert st["ready"] == "3/3"
    for pod in pods:
        exit_pod(core, namespace, pod.metadata.name, 0)
    st = wait_phase(cluster.api, namespace, name, "Succeeded")
    assert st["completionTime"]
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in st["conditions"])


def test_retryable_exit_restarts_the_whole_gang(cluster, namespace) -> None:
    core = cluster.core
    name = unique("retry")
    create_job(cluster.api, namespace, ddp_job(name, workers=2))
    before = wait_pods_running(core, namespace, name, 2)
    old_uids = {p.metadata.uid for p in before}

    exit_pod(core, namespace, f"{name}-worker-1", 137)

    def restarted() -> list[client.V1Pod] | None:
        pods = job_pods(core, namespace, name)
        fresh = [p for p in pods if p.metadata.uid not in old_uids]
        return pods if len(fresh) == 2 and len(pods) == 2 else None

    pods = wait_for(restarted, timeout=60, what="a new generation of both pods")
    assert {p.metadata.labels["dtjob.io/generation"] for p in pods} == {"1"}
    assert all(env_of(p)["DTJ_GANG_GENERATION"] == "1" for p in pods)
    st = status(cluster.api, namespace, name)
    assert st["restarts"] == 1
    wait_phase(cluster.api, namespace, name, "Running")


def test_permanent_exit_fails_job_at_once_naming_pod_and_code(cluster, namespace) -> None:
    name = unique("perm")
    create_job(cluster.api, namespace, ddp_job(name))
    wait_pods_running(cluster.core, namespace, name, 2)
    exit_pod(cluster.core, namespace, f"{name}-worker-0", 1)
    st = wait_phase(cluster.api, namespace, name, "Failed")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert f"{name}-worker-0" in failed["message"] and "1" in failed["message"]
    assert st.get("restarts", 0) == 0
    # Every transition is an Event on the job, with the reason.
    wait_for(
        lambda: events_for(cluster.core, namespace, name, failed["reason"]),
        what=f"a {failed['reason']} event on the job",
    )
    assert events_for(cluster.core, namespace, name, "Created")


def test_trainer_progress_appears_in_status(cluster, namespace) -> None:
    name = unique("prog")
    create_job(cluster.api, namespace, ddp_job(name))
    wait_pods_running(cluster.core, namespace, name, 2)
    # What the rank-0 trainer writes through its least-privilege channel (docs/env-contract.md).
    progress = {"step": 40, "totalSteps": 100, "loss": 0.25, "samplesPerSecond": 512.0}
    cluster.core.patch_namespaced_config_map(
        f"{name}-progress", namespace, {"data": {"progress.json": json.dumps(progress)}}
    )
    st = wait_for(
        lambda: (
            (s := status(cluster.api, namespace, name)).get("progress", {}).get("step") == 40 and s
        ),
        what="progress copied into status",
    )
    assert st["progress"]["loss"] == 0.25 and st["progress"]["totalSteps"] == 100


def test_backoff_limit_exhausted_fails_the_job(cluster, namespace) -> None:
    core = cluster.core
    name = unique("limit")
    create_job(cluster.api, namespace, ddp_job(name, workers=1, backoffLimit=1))
    for generation in range(2):
        pods = wait_for(
            lambda g=str(generation): [
                p
                for p in wait_pods_running(core, namespace, name, 1)
                if p.metadata.labels["dtjob.io/generation"] == g
            ],
            timeout=60,
            what=f"generation {generation} running",
        )
        exit_pod(core, namespace, pods[0].metadata.name, 137)
    st = wait_phase(cluster.api, namespace, name, "Failed")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert st["restarts"] == 1


def test_active_deadline_fails_job_and_removes_pods(cluster, namespace) -> None:
    name = unique("deadline")
    create_job(cluster.api, namespace, ddp_job(name, activeDeadlineSeconds=3))
    wait_pods_running(cluster.core, namespace, name, 2)
    st = wait_phase(cluster.api, namespace, name, "Failed", timeout=30)
    assert next(c for c in st["conditions"] if c["type"] == "Failed")["reason"] == (
        "DeadlineExceeded"
    )
    wait_for(lambda: not job_pods(cluster.core, namespace, name), what="pods deleted")


def test_suspend_removes_pods_and_resume_recreates_them(cluster, namespace) -> None:
    core = cluster.core
    name = unique("susp")
    create_job(cluster.api, namespace, ddp_job(name))
    wait_pods_running(core, namespace, name, 2)
    patch_job(cluster.api, namespace, name, {"spec": {"suspend": True}})
    wait_phase(cluster.api, namespace, name, "Suspended")
    wait_for(
        lambda: (
            not core.list_namespaced_pod(
                namespace, label_selector=f"dtjob.io/job-name={name}"
            ).items
        ),
        what="pods gone",
    )
    patch_job(cluster.api, namespace, name, {"spec": {"suspend": False}})
    wait_pods_running(core, namespace, name, 2)
    wait_phase(cluster.api, namespace, name, "Running")


def test_ttl_after_finished_deletes_the_job(cluster, namespace) -> None:
    name = unique("ttl")
    create_job(cluster.api, namespace, ddp_job(name, workers=1, ttlSecondsAfterFinished=2))
    pods = wait_pods_running(cluster.core, namespace, name, 1)
    exit_pod(cluster.core, namespace, pods[0].metadata.name, 0)
    wait_phase(cluster.api, namespace, name, "Succeeded")
    wait_for(lambda: get_job(cluster.api, namespace, name) is None, timeout=30, what="job deleted")


def test_deleting_the_job_removes_every_child(cluster, namespace) -> None:
    core = cluster.core
    name = unique("gc")
    create_job(cluster.api, namespace, ddp_job(name))
    wait_pods_running(core, namespace, name, 2)
    client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object(
        "dtjob.io",
        "v1alpha1",
        namespace,
        "distributedtrainingjobs",
        name,
        propagation_policy="Foreground",
    )
    selector = f"dtjob.io/job-name={name}"

    def all_gone() -> bool:
        return not (
            core.list_namespaced_pod(namespace, label_selector=selector).items
            or core.list_namespaced_config_map(namespace, label_selector=selector).items
            or core.list_namespaced_service(namespace, label_selector=selector).items
            or core.list_namespaced_service_account(namespace, label_selector=selector).items
        )

    wait_for(all_gone, timeout=60, what="every child garbage-collected")


def test_a_job_whose_namespace_is_deleted_goes_with_it_without_a_restart(cluster) -> None:
    # The namespace controller deletes the pods before the job: the operator must not take
    # that for a lost gang (a restart, and creates the API server refuses there).
    namespace = create_namespace(cluster.core)
    name = unique("nsgone")
    create_job(cluster.api, namespace, ddp_job(name))
    wait_phase(cluster.api, namespace, name, "Running")
    delete_namespace_now(cluster.core, namespace)
    seen: list[tuple[str | None, int]] = []

    def job_gone() -> bool:
        job = get_job(cluster.api, namespace, name)
        if job is not None:
            st = job.get("status") or {}
            seen.append((st.get("phase"), int(st.get("restarts") or 0)))
        return job is None

    wait_for(job_gone, timeout=120, interval=0.1, what="the job gone with its namespace")
    assert seen and {phase for phase, _ in seen} == {"Running"}, seen
    assert {restarts for _, restarts in seen} == {0}, seen


def test_operator_killed_mid_reconcile_leaves_exactly_the_expected_pods(
    cluster, namespace, operator
) -> None:
    core = cluster.core
    name = unique("crash")
    create_job(cluster.api, namespace, ddp_job(name, workers=16))
    # Kill the operator while it is creating the 16 pods, then start a fresh one.
    wait_for(lambda: job_pods(core, namespace, name), timeout=30, what="first pod created")
    operator.kill()
    operator.start()
    pods = wait_pods_running(core, namespace, name, 16, timeout=90)
    assert sorted(p.metadata.name for p in pods) == sorted(f"{name}-worker-{i}" for i in range(16))
    wait_phase(cluster.api, namespace, name, "Running")
    all_pods = core.list_namespaced_pod(namespace, label_selector=f"dtjob.io/job-name={name}")
    assert len(all_pods.items) == 16
