"""Checkpoint storage with the operator running: the CheckpointStorage condition and its
event for a job without a claim, a job that waits for a missing claim and starts once it is
created, a ReadWriteOnce claim shared by a gang, a pending claim, and a ReadWriteOncePod claim
that can never serve a gang. Claims are bound statically to hostPath volumes (this cluster has
no StorageClass, so a dynamically provisioned claim would stay Pending)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from helpers.jobs import JobBuilder, create_job, job_pods, status, wait_phase, wait_pods_running
from helpers.kube import bound_claim, claim, events_for, unique, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]


def storage_condition(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    conditions = status(api, ns, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "CheckpointStorage"), None)


def wait_storage_reason(api: client.ApiClient, ns: str, name: str, reason: str) -> dict[str, Any]:
    return wait_for(
        lambda: (c := storage_condition(api, ns, name)) and c["reason"] == reason and c,
        60,
        what=f"CheckpointStorage {reason} on {ns}/{name} (now {storage_condition(api, ns, name)})",
    )


def job(name: str, workers: int, claim: str | None = None) -> dict[str, Any]:
    builder = JobBuilder(name).strategy("DataParallel").role("worker", workers, gpus=1)
    if claim:
        builder.spec(checkpoint={"claimName": claim})
    return builder.build()


def test_job_without_a_claim_says_its_checkpoints_are_ephemeral(
    cluster: Any, namespace: str
) -> None:
    name = unique("eph")
    create_job(cluster.api, namespace, job(name, 2))
    wait_pods_running(cluster.core, namespace, name, 2)
    c = wait_storage_reason(cluster.api, namespace, name, "EphemeralCheckpoints")
    assert c["status"] == "False" and "spec.checkpoint.claimName" in c["message"]
    wait_phase(cluster.api, namespace, name, "Running")
    time.sleep(6)  # more passes (progress sync every 5s) must not repeat the event
    events = events_for(cluster.core, namespace, name, "EphemeralCheckpoints")
    assert len(events) == 1 and events[0].type == "Normal"


def test_missing_claim_holds_the_gang_until_it_is_created(
    cluster: Any, namespace: str, volumes: list[str]
) -> None:
    name, claim_name = unique("noclaim"), "ckpt"
    create_job(cluster.api, namespace, job(name, 2, claim=claim_name))
    c = wait_storage_reason(cluster.api, namespace, name, "ClaimNotFound")
    assert c["status"] == "False" and f"'{claim_name}'" in c["message"]
    assert f"'{namespace}'" in c["message"]
    wait_phase(cluster.api, namespace, name, "Pending")  # admitted (Queued first), waiting
    warnings = wait_for(
        lambda: events_for(cluster.core, namespace, name, "ClaimNotFound"), 30, what="event"
    )
    assert warnings[0].type == "Warning"
    time.sleep(12)  # a resync later, still nothing that would hang in FailedMount
    assert job_pods(cluster.core, namespace, name) == []
    assert status(cluster.api, namespace, name)["phase"] == "Pending"

    bound_claim(cluster.core, namespace, claim_name, "ReadWriteMany", volumes)
    pods = wait_pods_running(cluster.core, namespace, name, 2)
    c = wait_storage_reason(cluster.api, namespace, name, "Persistent")
    assert c["status"] == "True"
    for pod in pods:
        mounted = [v.persistent_volume_claim for v in pod.spec.volumes]
        assert any(m and m.claim_name == claim_name for m in mounted)


def test_gang_on_a_read_write_once_claim_is_warned(
    cluster: Any, namespace: str, volumes: list[str]
) -> None:
    name = unique("rwo")
    bound_claim(cluster.core, namespace, "ckpt", "ReadWriteOnce", volumes)
    create_job(cluster.api, namespace, job(name, 2, claim="ckpt"))
    c = wait_storage_reason(cluster.api, namespace, name, "ClaimNotShareable")
    assert c["status"] == "False" and "ReadWriteOnce claim 'ckpt'" in c["message"]
    # A warning, not a block: the pods may all land on one node.
    wait_for(lambda: len(job_pods(cluster.core, namespace, name)) == 2, 60, what="2 pods")
    events = wait_for(
        lambda: events_for(cluster.core, namespace, name, "ClaimNotShareable"), 30, what="event"
    )
    assert events[0].type == "Warning"


def test_pending_claim_is_reported_and_the_pods_are_created(cluster: Any, namespace: str) -> None:
    name = unique("pend")
    claim(cluster.core, namespace, "ckpt", "ReadWriteMany")  # no volume, no StorageClass
    create_job(cluster.api, namespace, job(name, 2, claim="ckpt"))
    c = wait_storage_reason(cluster.api, namespace, name, "ClaimPending")
    assert c["status"] == "False" and "not bound" in c["message"]
    wait_for(lambda: len(job_pods(cluster.core, namespace, name)) == 2, 60, what="2 pods")


def test_read_write_once_pod_claim_for_a_gang_fails_the_job(
    cluster: Any, namespace: str, volumes: list[str]
) -> None:
    name = unique("rwop")
    bound_claim(cluster.core, namespace, "ckpt", "ReadWriteOncePod", volumes)
    create_job(cluster.api, namespace, job(name, 2, claim="ckpt"))
    st = wait_phase(cluster.api, namespace, name, "Failed")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec" and "ReadWriteOncePod" in failed["message"]
    assert job_pods(cluster.core, namespace, name) == []
