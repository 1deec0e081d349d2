"""Probe-first pod creation against the real API server: a gang whose pods are refused costs
one create per attempt, not one per pod; a gang that may be created is created whole.
Creates are counted from the local cluster's audit log (hack/audit-policy.yaml logs every
pod create with its answer), not from the operator."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers.jobs import JobBuilder, create_job, status, wait_phase, wait_pods_running
from helpers.kube import unique, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
GANG = 16


def pod_creates(audit: Path, namespace: str, job: str) -> list[int]:
    """Answer codes of every pod create of `job` the API server finished, in order."""
    codes = []
    for line in audit.read_text().splitlines():
        record = json.loads(line)
        ref = record.get("objectRef") or {}
        if (
            record.get("stage") == "ResponseComplete"
            and record.get("verb") == "create"
            and ref.get("resource") == "pods"
            and not ref.get("subresource")
            and ref.get("namespace") == namespace
            and (ref.get("name") or "").startswith(f"{job}-")
        ):
            codes.append((record.get("responseStatus") or {}).get("code"))
    return codes


@pytest.fixture
def audit(cluster) -> Path:  # type: ignore[no-untyped-def]
    path: Path = cluster.kubeconfig.parent / "logs" / "audit.log"
    if not path.exists():
        pytest.skip("a cluster without the local audit log")
    return path


def running_condition(st: dict[str, object]) -> dict[str, str]:
    conditions = st.get("conditions") or []
    assert isinstance(conditions, list)
    return next((c for c in conditions if c["type"] == "Running"), {})


def test_a_gang_refused_for_good_costs_one_create(cluster, namespace, audit) -> None:
    # A missing PriorityClass: the Priority admission plugin refuses every pod (403), a
    # refusal the same request meets again, so the job fails after its first create.
    name = unique("refused")
    job = JobBuilder(name).role("worker", GANG, cpu="10m")
    create_job(cluster.api, namespace, job.spec(priorityClassName="no-such-class").build())
    st = wait_phase(cluster.api, namespace, name, "Failed", timeout=60)
    assert "no PriorityClass with name no-such-class" in str(st.get("conditions"))
    time.sleep(2)  # any further pass would have tried by now
    codes = pod_creates(audit, namespace, name)
    print(f"\n{GANG}-pod gang refused for good: {len(codes)} pod create(s), answers {codes}")
    assert codes and set(codes) == {403}
    assert len(codes) <= 2, codes  # one pass, one batch of one (a retried pass: two)


def test_a_gang_refused_for_a_while_sends_one_create_per_retry_then_starts_whole(
    cluster, namespace, audit
) -> None:
    # A ResourceQuota on limits.cpu, which the gang admission does not count but the API
    # server enforces: every pod is refused (403 exceeded quota) until the quota goes away.
    cluster.core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "no-cpu"}, "spec": {"hard": {"limits.cpu": "0"}}}
    )
    name = unique("wait")
    create_job(cluster.api, namespace, JobBuilder(name).role("worker", GANG, cpu="10m").build())
    wait_for(
        lambda: (
            running_condition(status(cluster.api, namespace, name)).get("reason") == "CreateFailed"
        ),
        timeout=60,
        what="the refusal in the job's status",
    )
    time.sleep(15)  # retries with backoff: 1, 2, 4, 8 s
    codes = pod_creates(audit, namespace, name)
    passes = len(codes)
    print(f"\n{GANG}-pod gang refused for 15 s: {passes} pod creates, answers {set(codes)}")
    assert codes and set(codes) == {403}, codes
    # Without the probe every pass sent all 16 (at least 16 x 4 here); now one per pass.
    assert passes <= 10, codes
    cluster.core.delete_namespaced_resource_quota("no-cpu", namespace)
    started = time.monotonic()
    wait_pods_running(cluster.core, namespace, name, GANG, timeout=90)
    took = time.monotonic() - started
    created = [c for c in pod_creates(audit, namespace, name) if c == 201]
    assert len(created) == GANG, created  # the whole gang, each pod once
    print(f"quota removed -> all {GANG} pods running in {took:.1f}s")
