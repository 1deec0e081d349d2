"""Failure handling on real infrastructure: what the API server refuses, disruptions, dead
nodes. Each test prints how long the job took to reach its answer (`-s` shows it)."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from kubernetes import client

from helpers.jobs import JobBuilder, create_job, status, wait_phase, wait_pods_running
from helpers.kube import (
    events_for,
    fake_gpu_node,
    kill_kubelet,
    node_ready,
    set_node_ready,
    unique,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
# The dead-node test waits out the margin after the pod's grace period: 5 s instead of the
# default 30 s proves the same force-delete (no other test here has a lost node).
OPERATOR_ENV = {"DTJOB_FORCE_DELETE_MARGIN_SECONDS": "5"}
JOB_LABEL = "dtjob.io/job-name"
DELETE_AFTER = "dtjob.io/kwok-delete-after"  # hack/kwok/pod-delete-slow.yaml


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


def fresh_gang_running(cluster, namespace: str, name: str, old_uids: set[str], count: int):  # type: ignore[no-untyped-def]
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}").items
    fresh = [p for p in pods if p.metadata.uid not in old_uids and p.status.phase == "Running"]
    return fresh if len(fresh) == count and len(pods) == count else None


def gang_state(cluster, namespace: str, name: str, nodes: list[str]) -> str:  # type: ignore[no-untyped-def]
    """The job's phase and conditions, its pods and the nodes': what a timeout reports."""
    st = status(cluster.api, namespace, name)
    conds = [(c["type"], c["status"], c.get("reason")) for c in st.get("conditions") or []]
    # The verdict's own words first: CI keeps only the first lines of a failure's message.
    said = [c.get("message", "")[:300] for c in st.get("conditions") or []
            if c["type"] in ("Failed", "Restarting") and c["status"] == "True"]  # fmt: skip
    pods = [
        (
            p.metadata.name,
            p.metadata.uid[:8],
            p.status.phase,
            p.spec.node_name,
            p.metadata.deletion_timestamp,
        )
        for p in cluster.core.list_namespaced_pod(
            namespace, label_selector=f"{JOB_LABEL}={name}"
        ).items
    ]
    ready = {n: node_ready(cluster.core, n) for n in nodes}
    return f"job {st.get('phase')} {said} {conds}; pods {pods}; nodes Ready {ready}"


def wait_fresh_gang(cluster, namespace, name, old, nodes, timeout, where):  # type: ignore[no-untyped-def]
    """Both pods of a gang other than the `old` pod uids running; a timeout says the job's,
    pods' and nodes' state."""
    return wait_for(
        lambda: fresh_gang_running(cluster, namespace, name, old, 2),
        timeout=timeout,
        what=f"a fresh gang running {where}",
        explain=lambda: gang_state(cluster, namespace, name, nodes),
    )


def test_evicted_pod_restarts_the_gang_without_consuming_backoff_limit(cluster, namespace) -> None:
    core = cluster.core
    name = unique("evict")
    create_job(cluster.api, namespace, ddp_job(name, backoffLimit=0).build())
    before = wait_pods_running(core, namespace, name, 2)
    victim = f"{name}-worker-1"
    # A real kubelet takes a moment to stop a pod; meanwhile it carries DisruptionTarget.
    core.patch_namespaced_pod(
        victim, namespace, {"metadata": {"annotations": {DELETE_AFTER: "3s"}}}
    )
    started = time.monotonic()
    core.create_namespaced_pod_eviction(
        victim,
        namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=victim, namespace=namespace)),
    )
    old = {p.metadata.uid for p in before}
    wait_for(
        lambda: fresh_gang_running(cluster, namespace, name, old, 2),
        timeout=60,
        what="a fresh gang running",
    )
    st = wait_phase(cluster.api, namespace, name, "Running")
    took = time.monotonic() - started
    assert (st["restarts"], st["countedRestarts"]) == (1, 0)
    # Running again, the Restarting condition is False (PodsReady); the event keeps why.
    [event] = wait_for(  # the event follows the status patch: waited for
        lambda: events_for(core, namespace, name, "Disrupted"), what="the Disrupted event"
    )
    assert "EvictionByEvictionAPI" in event.message, event.message
    print(f"\nevicted -> Running again in {took:.1f}s; event Disrupted: {event.message}")


def test_pod_stuck_terminating_on_a_dead_node_does_not_freeze_the_job(cluster, namespace) -> None:
    core = cluster.core
    pool = unique("pool")
    nodes = [f"{pool}-{i}" for i in range(4)]  # one dies, one goes NotReady, two are left
    for node in nodes:
        core.create_node(fake_gpu_node(node, gpus=1, labels={"pool": pool}, taint=pool))
    try:
        for node in nodes:
            wait_for(lambda node=node: node_ready(core, node), what=f"node {node} Ready")
        template = {
            "nodeSelector": {"pool": pool},
            "tolerations": [{"key": pool, "operator": "Exists"}],
        }
        name = unique("deadnode")
        job = (
            JobBuilder(name).role("worker", 2, gpus=1, template=template).run_policy(backoffLimit=0)
        )
        create_job(cluster.api, namespace, job.build())
        before = wait_pods_running(core, namespace, name, 2)
        victim = before[1]
        dead = victim.spec.node_name
        started = time.monotonic()
        kill_kubelet(cluster.api, dead)
        wait_for(lambda: node_ready(core, dead) is not True, timeout=120, what=f"{dead} not Ready")
        unknown_after = time.monotonic() - started
        # Deleted (by a user, a drain, or the taint manager once its toleration ends): no
        # kubelet confirms, so the pod would stay Terminating for ever.
        core.delete_namespaced_pod(victim.metadata.name, namespace, grace_period_seconds=5)
        deleted_at = time.monotonic()
        old = {p.metadata.uid for p in before}
        fresh = wait_fresh_gang(cluster, namespace, name, old, nodes, 120, "on the live nodes")
        assert dead not in {p.spec.node_name for p in fresh}
        st = wait_phase(cluster.api, namespace, name, "Running")
        took = time.monotonic() - deleted_at
        assert (st["restarts"], st["countedRestarts"]) == (1, 0)
        [event] = wait_for(  # the event follows the status patch: waited for
            lambda: events_for(core, namespace, name, "Disrupted"), what="the Disrupted event"
        )
        assert "node lost" in event.message, event.message
        print(
            f"\ndead node: NotReady/Unknown {unknown_after:.0f}s after the kubelet died; "
            f"pod deleted -> Running again on other nodes in {took:.1f}s "
            f"(grace 5s + force-delete margin 5s); restarts {st['restarts']}, counted 0"
        )
        # An admin force-deletes a member off a node that went NotReady (kubectl delete
        # --force): a disruption, not a failure that would use up backoffLimit 0. The
        # watch shows the pod terminating, then gone; a pass that comes only after both
        # (a busy operator) judges it by its last state (gone_pods.py; the unit tests
        # test_gone_pods and test_lifecycle_sequences hold that path, which no test here
        # can force).
        victim = fresh[0]
        set_node_ready(core, victim.spec.node_name, False)
        core.delete_namespaced_pod(victim.metadata.name, namespace, grace_period_seconds=0)
        old = {p.metadata.uid for p in fresh}
        again = wait_fresh_gang(cluster, namespace, name, old, nodes, 60, "after the force-delete")
        assert not {dead, victim.spec.node_name} & {p.spec.node_name for p in again}
        st = wait_phase(cluster.api, namespace, name, "Running")
        assert (st["restarts"], st["countedRestarts"]) == (2, 0)
    finally:
        for node in nodes:
            with contextlib.suppress(client.ApiException):
                core.delete_node(node)


def running_reason(cluster, namespace: str, name: str) -> dict[str, str] | None:  # type: ignore[no-untyped-def]
    st = status(cluster.api, namespace, name)
    running = next((c for c in st.get("conditions") or [] if c["type"] == "Running"), None)
    return running if running and running.get("reason") == "ChildConflict" else None


def test_preexisting_service_account_named_like_a_child_is_never_used(cluster, namespace) -> None:
    core = cluster.core
    name = unique("sa")
    core.create_namespaced_service_account(namespace, {"metadata": {"name": f"{name}-trainer"}})
    create_job(cluster.api, namespace, ddp_job(name).build())
    running = wait_for(
        lambda: running_reason(cluster, namespace, name), what="the ChildConflict condition"
    )
    assert f"ServiceAccount {name}-trainer" in running["message"]
    assert "not owned by this job" in running["message"]
    wait_for(  # the event follows the status patch (a CI run read them in between)
        lambda: events_for(core, namespace, name, "ChildConflict"), what="the ChildConflict event"
    )
    time.sleep(2)
    assert not all_pods(cluster, namespace, name)  # no pod runs as someone else's account
    # Once the stranger is gone, the job makes its own and runs.
    core.delete_namespaced_service_account(f"{name}-trainer", namespace)
    wait_phase(cluster.api, namespace, name, "Running", timeout=60)
    sa = core.read_namespaced_service_account(f"{name}-trainer", namespace)
    assert sa.metadata.owner_references[0].name == name


def test_delete_and_recreate_under_the_same_name_adopts_nothing_stale(cluster, namespace) -> None:
    core, custom = cluster.core, client.CustomObjectsApi(cluster.api)
    name = unique("again")
    create_job(cluster.api, namespace, ddp_job(name).build())
    wait_pods_running(core, namespace, name, 2)
    old_uid = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        "dtjob.io", "v1alpha1", namespace, "distributedtrainingjobs", name
    )["metadata"]["uid"]
    # Hold the old ServiceAccount so the garbage collector cannot remove it at once (the
    # window that `kubectl delete -f x && kubectl apply -f x` races with).
    hold = {"metadata": {"finalizers": ["dtjob.io/test-hold"]}}
    core.patch_namespaced_service_account(f"{name}-trainer", namespace, hold)
    custom.delete_namespaced_custom_object(
        "dtjob.io", "v1alpha1", namespace, "distributedtrainingjobs", name
    )
    wait_for(
        lambda: (
            not any(
                p.metadata.owner_references[0].uid == old_uid
                for p in core.list_namespaced_pod(
                    namespace, label_selector=f"{JOB_LABEL}={name}"
                ).items
            )
        ),
        what="the old job's pods collected",
    )
    create_job(cluster.api, namespace, ddp_job(name).build())
    running = wait_for(
        lambda: running_reason(cluster, namespace, name), what="the ChildConflict condition"
    )
    assert "earlier job named" in running["message"] and old_uid in running["message"]
    assert not all_pods(cluster, namespace, name)
    started = time.monotonic()
    core.patch_namespaced_service_account(
        f"{name}-trainer", namespace, {"metadata": {"finalizers": None}}
    )
    st = wait_phase(cluster.api, namespace, name, "Running", timeout=60)
    new_uid = custom.get_namespaced_custom_object(
        "dtjob.io", "v1alpha1", namespace, "distributedtrainingjobs", name
    )["metadata"]["uid"]
    sa = core.read_namespaced_service_account(f"{name}-trainer", namespace)
    assert sa.metadata.owner_references[0].uid == new_uid
    print(
        f"\nre-created job: waited (ChildConflict) for the old ServiceAccount, Running "
        f"{time.monotonic() - started:.1f}s after it could go; restarts {st.get('restarts')}"
    )


def test_admission_is_stored_before_the_gang_is_created(cluster, namespace) -> None:
    # An operator killed between the two writes must find a job its status calls admitted
    # (the AdmissionBook is re-derived from status), never a Queued job holding pods.
    audit = cluster.kubeconfig.parent / "logs" / "audit.log"
    if not audit.exists():
        pytest.skip("a cluster without the local audit log")
    name = unique("order")
    create_job(cluster.api, namespace, ddp_job(name).build())
    wait_pods_running(cluster.core, namespace, name, 2)
    writes = []
    for line in audit.read_text().splitlines():
        record = json.loads(line)
        ref = record.get("objectRef") or {}
        if ref.get("namespace") != namespace or record.get("stage") != "ResponseComplete":
            continue
        if ref.get("resource") == "pods" and record["verb"] == "create":
            if (ref.get("name") or "").startswith(f"{name}-"):
                writes.append("pod")
        elif ref.get("subresource") == "status" and ref.get("name") == name:
            body = json.dumps(record.get("requestObject") or {})
            writes.append("admitted" if '"Admitted", "status": "True"' in body else "status")
    assert "admitted" in writes and "pod" in writes, writes
    assert writes.index("admitted") < writes.index("pod"), writes


def test_pod_field_the_schema_allows_but_the_pod_api_refuses_fails_invalid_spec(
    cluster, namespace
) -> None:
    # The CRD carries core/v1's schema for the template, not its validation: a toleration
    # with operator Exists and a value passes the schema; the pod API answers 422.
    name = unique("tol")
    template = {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}
    job = JobBuilder(name).role("worker", 2, gpus=1, template=template).build()
    started = time.monotonic()
    create_job(cluster.api, namespace, job)
    st = wait_phase(cluster.api, namespace, name, "Failed", timeout=30)
    took = time.monotonic() - started
    failed = condition(st, "Failed")
    assert failed["reason"] == "InvalidSpec" and "(422 Invalid)" in failed["message"]
    assert "spec.tolerations[0]" in failed["message"], failed["message"]
    wait_for(lambda: not all_pods(cluster, namespace, name), timeout=30, what="no pods left")
    print(f"\n422 pod -> Failed/InvalidSpec in {took:.1f}s: {failed['message']}")
