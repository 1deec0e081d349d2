"""Failure handling on real infrastructure: what the API server refuses, disruptions, dead
nodes. Each test prints how long the job took to reach its answer (`-s` shows it)."""

from __future__ import annotations

import time

import pytest

from helpers.jobs import JobBuilder, create_job, wait_phase
from helpers.kube import events_for, unique, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
JOB_LABEL = "dtjob.io/job-name"


def ddp_job(name: str, workers: int = 2, **policy: object) -> JobBuilder:
    return (
        JobBuilder(name)
        .strategy("DataParallel")
        .role("worker", workers, gpus=1)
        .run_policy(**policy)
    )


def condition(st: dict[str, object], type_: str) -> dict[str, str]:
    conditions = st.get("conditions") or []
    assert isinstance(conditions, list)
    return next(c for c in conditions if c["type"] == type_)


def all_pods(cluster, namespace: str, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Every pod of the job, terminating ones included."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}")
    return [p.metadata.name for p in pods.items]


def test_pod_the_api_server_refuses_fails_the_job_naming_why(cluster, namespace) -> None:
    # The Priority admission plugin refuses a pod whose PriorityClass does not exist (403);
    # the same pod will be refused again, so the job fails instead of waiting forever.
    name = unique("nopc")
    started = time.monotonic()
    create_job(
        cluster.api, namespace, ddp_job(name).spec(priorityClassName="no-such-class").build()
    )
    st = wait_phase(cluster.api, namespace, name, "Failed", timeout=30)
    took = time.monotonic() - started
    failed = condition(st, "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "no PriorityClass with name no-such-class" in failed["message"]
    assert f"{name}-worker-" in failed["message"]  # names the pod the server refused
    wait_for(lambda: not all_pods(cluster, namespace, name), timeout=30, what="no pods left")
    wait_for(lambda: events_for(cluster.core, namespace, name, "InvalidSpec"), what="an event")
    print(f"\nrefused pod -> Failed/InvalidSpec in {took:.1f}s: {failed['message']}")
