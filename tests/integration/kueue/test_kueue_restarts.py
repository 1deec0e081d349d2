"""Kueue and the operator restarted under Kueue jobs, as a cluster restarts them (an upgrade,
a rescheduled manager pod, an OOM kill): a running job keeps its Workload, its pods and its
quota across a Kueue restart, and Kueue, back, still counts that quota against the next job;
an operator killed while Kueue admits a job starts one gang for it, from one Workload,
once it is back."""

from __future__ import annotations

import time
from typing import Any

import pytest
from integration.kueue.test_kueue_contract import (
    HOLD_SECONDS,
    all_pods,
    is_true,
    story,
    wait_pending,
    workload,
)
from integration.kueue.test_kueue_jobs import (
    operator,  # noqa: F401 (its fixture, for this module)
    queued_job,
    team_queue,
)
from integration.kueue.test_kueue_runs import custom

from helpers.jobs import create_job, job_pods, status, wait_phase
from helpers.jobs import wait_pods_running as running
from helpers.kube import create_namespace, unique, wait_for
from helpers.kueue import GROUP, VERSION, Kueue
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]


def test_a_kueue_restart_leaves_a_running_job_its_workload_pods_and_quota(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "kr")
    try:
        _kueue_restart(cluster, kueue, ns)
    finally:  # its pods would hold the fake GPUs that later modules wait for
        cluster.core.delete_namespace(ns)


def _kueue_restart(cluster: Any, kueue: Kueue, ns: str) -> None:
    team_queue(cluster, ns, gpus=1)
    a, b = unique("a"), unique("b")
    create_job(cluster.api, ns, queued_job(a, 1, 1))
    (pod,) = running(cluster.core, ns, a, 1)
    wait_phase(cluster.api, ns, a, "Running")
    before = workload(cluster, ns, a)
    assert before is not None and is_true(before, "Admitted"), before
    # Down for several of the operator's passes: none of them may take Kueue's silence for
    # a withdrawn admission.
    kueue.restart(down_seconds=HOLD_SECONDS)
    create_job(cluster.api, ns, queued_job(b, 1, 1))
    # Kueue, back, rebuilt its usage from the admitted Workloads: B does not fit beside A.
    wait_pending(cluster, ns, b)
    time.sleep(HOLD_SECONDS)
    after = workload(cluster, ns, a)
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"], after
    assert is_true(after, "Admitted") and after["spec"].get("active", True), story(cluster, ns, a)
    st = status(cluster.api, ns, a)
    assert st["phase"] == "Running", story(cluster, ns, a, b)
    assert not (st.get("admission") or {}).get("preemptions"), st
    assert [p.metadata.uid for p in all_pods(cluster.core, ns, a)] == [pod.metadata.uid]
    assert status(cluster.api, ns, b).get("phase") == "Queued", story(cluster, ns, a, b)
    assert not all_pods(cluster.core, ns, b)


def test_an_operator_killed_while_kueue_admits_starts_one_gang_from_one_workload(
    cluster: Any,
    kueue: Kueue,
    operator: OperatorProcess,  # noqa: F811 (the fixture)
) -> None:
    ns = create_namespace(cluster.core, "ko")
    try:
        _operator_killed_while_kueue_admits(cluster, operator, ns)
    finally:  # its pods would hold the fake GPUs that later modules wait for
        cluster.core.delete_namespace(ns)


def _operator_killed_while_kueue_admits(cluster: Any, op: OperatorProcess, ns: str) -> None:
    a = unique("a")
    create_job(cluster.api, ns, queued_job(a, 2, 1))
    wait_for(lambda: workload(cluster, ns, a) is not None, 60, what=f"{a}'s Workload created")
    # SIGKILL once the Workload is written, and only then the queue that admits it: Kueue
    # admits the job with no operator running (a queue there from the start let Kueue and
    # the operator finish the admission in the moment before the kill, on a loaded machine).
    op.kill()
    try:
        team_queue(cluster, ns, gpus=2)
        wait_for(lambda: is_true(workload(cluster, ns, a), "Admitted"), 60,
                 what=f"{a}'s Workload admitted while the operator is down",
                 explain=lambda: story(cluster, ns, a))  # fmt: skip
        assert not all_pods(cluster.core, ns, a)
    finally:
        op.start()
    pods = running(cluster.core, ns, a, 2)
    wait_phase(cluster.api, ns, a, "Running")
    time.sleep(HOLD_SECONDS)
    workloads = custom(cluster).list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")
    assert len(workloads["items"]) == 1, [w["metadata"]["name"] for w in workloads["items"]]
    now = sorted(p.metadata.uid for p in all_pods(cluster.core, ns, a))
    # One legitimate second gang: Kueue's waitForPodsReady counts from its admission, made
    # while the operator was down, and an operator slow to start on a loaded machine had
    # the gang ready past the package's 15 s: Kueue evicted it (a preemption in the job's
    # status) and it was made again, before or after `pods` was read. Any other cause is a
    # second gang this test exists to catch.
    said = [e.message for e in cluster.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={a}").items]  # fmt: skip
    timed_out = any("PodsReadyTimeout" in m for m in said)
    if now != sorted(p.metadata.uid for p in pods):
        assert timed_out, (story(cluster, ns, a), said)
    assert len(job_pods(cluster.core, ns, a)) == 2
    st = status(cluster.api, ns, a)
    preempted = (st.get("admission") or {}).get("preemptions") or 0
    assert st["phase"] == "Running" and preempted <= (1 if timed_out else 0), (st, said)
