"""The local control plane behaves like Kubernetes: scheduling on GPU capacity, quota
admission, garbage collection, and the KWOK knobs tests use to play the kubelet."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from helpers.kube import (
    GPU,
    PodBuilder,
    drive_pod_exit,
    events_for,
    exit_codes,
    fake_gpu_node,
    node_ready,
    set_node_ready,
    unique,
    wait_for,
    wait_pod_phase,
)

pytestmark = pytest.mark.integration


def test_fake_gpu_nodes_are_ready_and_advertise_gpus(local_cluster, core):
    nodes = core.list_node(label_selector="nvidia.com/gpu.present=true").items
    assert len(nodes) >= 1
    for node in nodes:
        assert int(node.status.allocatable[GPU]) > 0
        assert node_ready(core, node.metadata.name) is True
        assert not [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]


def test_gpu_pod_is_scheduled_on_a_gpu_node_and_runs(local_cluster, core, namespace):
    core.create_namespaced_pod(namespace, PodBuilder("trainer").gpus(2).build())

    pod = wait_pod_phase(core, namespace, "trainer", "Running")

    node = core.read_node(pod.spec.node_name)
    assert int(node.status.allocatable[GPU]) >= 2
    assert pod.status.container_statuses[0].ready is True
    assert pod.status.pod_ip


def test_pod_wanting_more_gpus_than_any_node_stays_pending(local_cluster, core, namespace):
    most = max(int(n.status.allocatable.get(GPU, "0")) for n in core.list_node().items)
    core.create_namespaced_pod(namespace, PodBuilder("too-big").gpus(most + 1).build())

    events = wait_for(
        lambda: events_for(core, namespace, "too-big", "FailedScheduling"),
        what="the scheduler's FailedScheduling event",
    )

    assert f"Insufficient {GPU}" in events[0].message
    pod = core.read_namespaced_pod("too-big", namespace)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name


def test_resource_quota_refuses_pod_beyond_gpu_quota(cluster, core, namespace):
    core.create_namespaced_resource_quota(
        namespace,
        {"metadata": {"name": "gpus"}, "spec": {"hard": {f"requests.{GPU}": "4"}}},
    )
    # Admission refuses every pod until the controller-manager has computed the usage.
    wait_for(
        lambda: core.read_namespaced_resource_quota("gpus", namespace).status.used,
        what="quota usage computed by the controller-manager",
    )
    core.create_namespaced_pod(namespace, PodBuilder("fits").gpus(3).build())

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, PodBuilder("exceeds").gpus(2).build())

    assert refused.value.status == 403
    body = refused.value.body
    assert "exceeded quota: gpus" in body
    assert f"requested: requests.{GPU}=2, used: requests.{GPU}=3, limited: requests.{GPU}=4" in body


def test_deleting_the_owner_garbage_collects_its_pods(cluster, core, namespace):
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    for i in range(2):
        core.create_namespaced_pod(namespace, PodBuilder(f"child-{i}").owned_by(owner).build())
    core.create_namespaced_pod(namespace, PodBuilder("bystander").build())

    core.delete_namespaced_config_map("owner", namespace)

    wait_for(
        lambda: (
            {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == {"bystander"}
        ),
        what="the garbage collector to delete the owned pods",
    )


def test_driving_pods_to_failed_and_succeeded_sets_exit_codes(local_cluster, core, namespace):
    for name in ("oom", "done"):
        core.create_namespaced_pod(namespace, PodBuilder(name).gpus(1).build())
        wait_pod_phase(core, namespace, name, "Running")

    failed = drive_pod_exit(core, namespace, "oom", 137, reason="OOMKilled")
    succeeded = drive_pod_exit(core, namespace, "done", 0)

    assert failed.status.phase == "Failed"
    assert exit_codes(failed) == {"main": 137}
    assert failed.status.container_statuses[0].state.terminated.reason == "OOMKilled"
    assert succeeded.status.phase == "Succeeded"
    assert exit_codes(succeeded) == {"main": 0}
    assert succeeded.status.container_statuses[0].state.terminated.reason == "Completed"


def test_pod_exits_on_its_own_after_the_annotated_delay(local_cluster, core, namespace):
    core.create_namespaced_pod(namespace, PodBuilder("short").exits(3, after="3s").build())
    wait_pod_phase(core, namespace, "short", "Running")

    pod = wait_pod_phase(core, namespace, "short", "Failed", timeout=20)

    assert exit_codes(pod) == {"main": 3}
    term = pod.status.container_statuses[0].state.terminated
    # Timestamps have one-second resolution: 3 s of running shows as at least 2.
    assert (term.finished_at - term.started_at).total_seconds() >= 2


def test_fake_node_can_go_not_ready_recover_and_be_removed(local_cluster, core):
    name = unique("test-node")
    core.create_node(fake_gpu_node(name, gpus=4, taint="dtjob.io/test-node"))
    try:
        wait_for(lambda: node_ready(core, name), what=f"node {name} Ready")

        set_node_ready(core, name, False)
        # The node lifecycle controller reacts as to a broken kubelet: scheduling stops.
        wait_for(
            lambda: any(
                t.key == "node.kubernetes.io/not-ready" for t in core.read_node(name).spec.taints
            ),
            what="the not-ready taint",
        )
        set_node_ready(core, name, True)
    finally:
        core.delete_node(name)

    wait_for(lambda: name not in {n.metadata.name for n in core.list_node().items}, what="removal")


def test_service_account_tokens_are_issued(cluster, namespace):
    auth = client.AuthenticationV1Api(cluster.api)
    core = cluster.core
    token = core.create_namespaced_service_account_token(
        "default",
        namespace,
        {"spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"]}},
    ).status.token
    review = auth.create_token_review({"spec": {"token": token}})
    assert review.status.authenticated is True
    assert review.status.user.username == f"system:serviceaccount:{namespace}:default"
