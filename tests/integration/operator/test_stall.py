"""Sick gangs on the real control plane (issue 36): stall detection (policies/stall.py) and
the nodes a restart points at (policies/node_blame.py). KWOK keeps the pods Running whatever
happens, as a hung gang's pods are; the test writes what rank 0's trainer writes (the
progress ConfigMap) and then stops writing, as a hung trainer does, and makes a container
exit with a GPU fault in its last words, as a trainer on a failing GPU does."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client

from helpers.jobs import (
    JobBuilder,
    create_job,
    job_pods,
    patch_job,
    status,
    wait_phase,
    wait_pods_running,
)
from helpers.kube import EXIT_CODE, events_for, unique, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
# The chart's taintSuspectNodes: a suspect node is tainted (the last test clears its own).
OPERATOR_ENV = {"DTJOB_TAINT_SUSPECT_NODES": "true"}
DEADLINE = 10  # runPolicy.progressDeadlineSeconds' least value


def _job(name: str) -> dict[str, Any]:
    return (
        JobBuilder(name)
        .strategy("DataParallel")
        .role("worker", 2, gpus=1)
        .run_policy(progressDeadlineSeconds=DEADLINE, backoffLimit=3)
        .build()
    )


def _report(cluster: Any, ns: str, name: str, step: int) -> None:
    """What rank 0 writes after a step (docs/env-contract.md), and the watch taking it in."""
    progress = {"step": step, "totalSteps": 1000, "loss": 1.0 / step}
    cluster.core.patch_namespaced_config_map(
        f"{name}-progress", ns, {"data": {"progress.json": json.dumps(progress)}}
    )
    wait_for(
        lambda: (status(cluster.api, ns, name).get("progressWatch") or {}).get("step") == step,
        30, what=f"the stall watch at step {step}",
    )  # fmt: skip


def _moving(cluster: Any, ns: str, name: str) -> set[str]:
    """A Running gang that made two steps (a move the watch judges from); its pods' uids."""
    pods = wait_pods_running(cluster.core, ns, name, 2)
    wait_phase(cluster.api, ns, name, "Running")
    for step in (1, 2):
        _report(cluster, ns, name, step)
    return {p.metadata.uid for p in pods}


def test_a_gang_whose_step_stands_still_is_stalled_and_restarted_once(
    cluster: Any, namespace: str
) -> None:
    ns, name = namespace, unique("still")
    create_job(cluster.api, ns, _job(name))
    first = _moving(cluster, ns, name)

    stalled = wait_for(lambda: events_for(cluster.core, ns, name, "Stalled"), 90,
                       what="a Stalled event")  # fmt: skip
    assert "training stalled: step 2 has not moved for" in stalled[0].message, stalled[0].message
    assert f"deadline {DEADLINE}s, runPolicy.progressDeadlineSeconds" in stalled[0].message
    # The gang is replaced whole, and the restart is a counted one.
    wait_for(
        lambda: (
            len(pods := job_pods(cluster.core, ns, name)) == 2
            and not {p.metadata.uid for p in pods} & first
            and all(p.status.phase == "Running" for p in pods)
        ),
        90, what="a new gang of two Running pods",
    )  # fmt: skip
    st = wait_phase(cluster.api, ns, name, "Running")
    assert st["restarts"] == 1 and st.get("countedRestarts", 1) == 1, st
    kept = cluster.core.read_namespaced_config_map(f"{name}-stalls", ns)
    assert "training stalled: step 2" in kept.data["stacks.txt"], kept.data
    # The new gang inherits the ConfigMap's step 2 as a baseline, not as its own progress:
    # it is not judged (and not restarted again) until its own step moves.
    time.sleep(2 * DEADLINE)
    assert len(events_for(cluster.core, ns, name, "Stalled")) == 1
    assert status(cluster.api, ns, name)["restarts"] == 1


def test_a_suspended_job_is_never_declared_stalled(cluster: Any, namespace: str) -> None:
    ns, name = namespace, unique("paused")
    create_job(cluster.api, ns, _job(name))
    _moving(cluster, ns, name)
    patch_job(cluster.api, ns, name, {"spec": {"suspend": True}})
    st = wait_phase(cluster.api, ns, name, "Suspended", timeout=60)
    assert "progressWatch" not in st, st
    time.sleep(2 * DEADLINE)  # twice the deadline with no step: still no stall
    assert not events_for(cluster.core, ns, name, "Stalled")
    assert status(cluster.api, ns, name)["phase"] == "Suspended"


XID = (
    "RuntimeError: CUDA error: unspecified launch failure\n"
    "NVRM: Xid 79, GPU has fallen off the bus."
)


def test_the_next_gang_keeps_off_the_node_of_a_gpu_fault(cluster: Any, namespace: str) -> None:
    ns, name = namespace, unique("xid")
    create_job(cluster.api, ns, _job(name))
    pods = wait_pods_running(cluster.core, ns, name, 2)
    wait_phase(cluster.api, ns, name, "Running")
    sick = pods[1]
    node = sick.spec.node_name
    # Exit 1, permanent by default: the GPU fault in its last words makes it retryable.
    cluster.core.patch_namespaced_pod(sick.metadata.name, ns, {"metadata": {"annotations": {
        EXIT_CODE: "1", "dtjob.io/kwok-message": XID}}})  # fmt: skip
    avoided = wait_for(lambda: events_for(cluster.core, ns, name, "NodeAvoided"), 60,
                       what="a NodeAvoided event")  # fmt: skip
    assert f"keep off node {node} until" in avoided[0].message, avoided[0].message
    assert "Xid 79, GPU has fallen off the bus." in avoided[0].message
    first = {p.metadata.uid for p in pods}
    fresh = wait_for(
        lambda: (
            len(ps := job_pods(cluster.core, ns, name)) == 2
            and not {p.metadata.uid for p in ps} & first
            and all(p.status.phase == "Running" for p in ps)
            and ps
        ),
        90, what="a new gang of two Running pods",
    )  # fmt: skip
    assert node not in {p.spec.node_name for p in fresh}, [p.spec.node_name for p in fresh]
    st = wait_phase(cluster.api, ns, name, "Running")
    assert [a["node"] for a in st["avoidedNodes"]] == [node], st
    assert st["restarts"] == 1, st
    for pod in fresh:  # steered off by the scheduler too, not only by our placement
        assert node in _preferred_off(pod), pod.spec.affinity


def _preferred_off(pod: Any) -> set[str]:
    """The nodes a pod's preferred node affinity steers it off by name."""
    terms = pod.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
    return {
        v for t in terms or [] for f in t.preference.match_fields or []
        if f.operator == "NotIn" for v in f.values
    }  # fmt: skip


def _avoiding(cluster: Any, node: str) -> list[str]:
    """Jobs of any namespace whose status avoids `node`."""
    jobs = client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        "dtjob.io", "v1alpha1", "distributedtrainingjobs")["items"]  # fmt: skip
    return [
        j["metadata"]["name"] for j in jobs
        if any(a.get("node") == node for a in (j.get("status") or {}).get("avoidedNodes") or [])
    ]  # fmt: skip


def _fail_with_xid(cluster: Any, ns: str, name: str) -> str:
    """The job's single pod exits with a GPU fault once Running; the node it was on."""
    (pod,) = wait_pods_running(cluster.core, ns, name, 1)
    cluster.core.patch_namespaced_pod(pod.metadata.name, ns, {"metadata": {"annotations": {
        EXIT_CODE: "1", "dtjob.io/kwok-message": XID}}})  # fmt: skip
    wait_for(lambda: events_for(cluster.core, ns, name, "NodeAvoided"), 60,
             what=f"{name}'s NodeAvoided event")  # fmt: skip
    return str(pod.spec.node_name)


def test_a_node_two_jobs_avoid_is_kept_off_by_every_job(cluster: Any, namespace: str) -> None:
    # Two jobs held to one node by their templates' nodeSelector fail there with a GPU fault:
    # the node becomes suspect for every job, a third job's included.
    ns = namespace
    node = sorted(n.metadata.name for n in cluster.core.list_node(
        label_selector="type=kwok,nvidia.com/gpu.present=true").items)[0]  # fmt: skip
    held = {"spec": {"nodeSelector": {"kubernetes.io/hostname": node}}}
    # An earlier test's job (its namespace going) may still avoid the node: wait it out.
    wait_for(lambda: not _avoiding(cluster, node), 90, what=f"no job avoiding {node}")
    first, second, third = unique("xa"), unique("xb"), unique("xc")
    for name in (first, second):
        create_job(cluster.api, ns, JobBuilder(name).strategy("DataParallel")
                   .role("worker", 1, gpus=1, template=held).build())  # fmt: skip
        assert _fail_with_xid(cluster, ns, name) == node
    told = wait_for(
        lambda: [e for e in cluster.core.list_event_for_all_namespaces(
            field_selector=f"involvedObject.kind=Node,involvedObject.name={node}").items
            if e.reason == "SuspectNode" and f"{ns}/{first}" in e.message],
        60, what=f"a SuspectNode event on node {node}",
    )  # fmt: skip
    assert f"restarts of 2 jobs pointed at it ({ns}/{first}, {ns}/{second})" in told[0].message
    try:
        # Tainted for an admin to inspect, with the evidence in its annotations.
        tainted = wait_for(lambda: _suspect_taint(cluster, node), 30, what=f"{node} tainted")
        assert tainted.effect == "NoSchedule", tainted
        notes = cluster.core.read_node(node).metadata.annotations
        assert notes["dtjob.io/suspect-jobs"] == ",".join(
            sorted([f"{ns}/{first}", f"{ns}/{second}"])
        )
        create_job(cluster.api, ns, JobBuilder(third).strategy("DataParallel")
                   .role("worker", 1, gpus=1).build())  # fmt: skip
        (pod,) = wait_pods_running(cluster.core, ns, third, 1)
        assert pod.spec.node_name != node
        assert node in _preferred_off(pod), pod.spec.affinity
        assert "avoidedNodes" not in status(cluster.api, ns, third)  # not its own avoidance
    finally:  # what an admin does after a look: the shared node is whole for later tests
        _untaint(cluster, node)


def _suspect_taint(cluster: Any, node: str) -> Any:
    taints = cluster.core.read_node(node).spec.taints or []
    return next((t for t in taints if t.key == "dtjob.io/suspect"), None)


def _untaint(cluster: Any, node: str) -> None:
    obj = cluster.core.read_node(node)
    kept = [
        cluster.api.sanitize_for_serialization(t)
        for t in obj.spec.taints or []
        if t.key != "dtjob.io/suspect"
    ]
    notes = {"dtjob.io/suspect-jobs": None, "dtjob.io/suspect-reason": None}
    cluster.core.patch_node(node, {"metadata": {"annotations": notes}, "spec": {"taints": kept}},
                            _content_type="application/merge-patch+json")  # fmt: skip
