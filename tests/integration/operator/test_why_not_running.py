"""The job says why it is not running, in its own status, on the real control plane: an
image KWOK cannot "pull" (hack/kwok/pod-image-pull-backoff.yaml), a pod the scheduler
cannot place, and a volume the kubelet cannot mount (pods held in ContainerCreating by
hack/kwok/pod-container-creating.yaml; the FailedMount events posted as the kubelet does).
The operator here has a short pods-ready timeout so re-queues end quickly."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from kubernetes import client

from helpers.jobs import JobBuilder, create_job, status, wait_phase
from helpers.kube import events_for, fake_gpu_node, node_ready, unique, wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]
UNPULLABLE = "registry.invalid/unpullable:1"
STUCK_CREATING = "registry.invalid/stuck-creating:1"
NO_SECRET = 'MountVolume.SetUp failed for volume "creds" : secret "nope" not found'
JOB_LABEL = "dtjob.io/job-name"
OPERATOR_ENV = {
    "DTJOB_TRAINER_IMAGE": "dtjob/trainer:test",
    "DTJOB_PODS_READY_TIMEOUT_SECONDS": "6",
    "DTJOB_REQUEUE_BACKOFF_SECONDS": "1",
    "DTJOB_RESYNC_SECONDS": "2",
    # Pod events do not wake a job (nothing watches them): a starting job looks at its pods'
    # every progress sync. Shorter than the pods-ready timeout, so there is time to show them.
    "DTJOB_PROGRESS_SYNC_SECONDS": "1",
}


@pytest.fixture(scope="module", autouse=True)
def short_timeout_operator(cluster, crd, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(cluster.kubeconfig, log, OPERATOR_ENV)
    proc.start()
    yield proc
    proc.stop()
    print(f"operator log: {log}")


def running_condition(st: dict[str, object]) -> dict[str, str]:
    conditions = st.get("conditions") or []
    assert isinstance(conditions, list)
    return next((c for c in conditions if c["type"] == "Running"), {})


def test_unpullable_image_is_named_then_fails_after_the_retry_limit(cluster, namespace) -> None:
    name = unique("pull")
    job = (
        JobBuilder(name)
        .role("worker", 2, gpus=1)
        .spec(trainer={"image": UNPULLABLE, "command": ["train"]})
        .run_policy(admissionRetryLimit=1)
    )
    started = time.monotonic()
    create_job(cluster.api, namespace, job.build())
    st = wait_for(
        lambda: (
            (s := status(cluster.api, namespace, name)).get("reason") == "ImagePullBackOff" and s
        ),
        timeout=30,
        what="the job's reason ImagePullBackOff",
    )
    shown = time.monotonic() - started
    message = running_condition(st)["message"]
    assert f"pod {name}-worker-" in message and UNPULLABLE in message, message
    st = wait_phase(cluster.api, namespace, name, "Failed", timeout=60)
    failed_after = time.monotonic() - started
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ImagePullBackOff" and st["reason"] == "ImagePullBackOff"
    assert "admissionRetryLimit" in failed["message"] and UNPULLABLE in failed["message"]
    assert st["admission"]["requeues"] == 1
    # One event per change of reason, not one per pass.
    seen = wait_for(
        lambda: events_for(cluster.core, namespace, name, "ImagePullBackOff"), what="the event"
    )
    assert len(seen) <= 3, [e.message for e in seen]
    print(
        f"\nImagePullBackOff shown after {shown:.1f}s; Failed after {failed_after:.1f}s "
        f"(timeout 6s, 1 re-queue): {failed['message']}"
    )


def test_unschedulable_gang_shows_the_schedulers_message(cluster, namespace) -> None:
    core = cluster.core
    pool = unique("pool")
    nodes = [f"{pool}-{i}" for i in range(2)]
    for node in nodes:
        core.create_node(fake_gpu_node(node, gpus=2, labels={"pool": pool}, taint=pool))
    name = unique("nosched")
    try:
        for node in nodes:
            wait_for(lambda node=node: node_ready(core, node), what=f"node {node} Ready")
        # Three pods that each need a node of their own on a pool of two: the GPUs add up
        # (admission passes), the scheduler cannot place the third.
        anti = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {JOB_LABEL: name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
        template = {
            "nodeSelector": {"pool": pool},
            "tolerations": [{"key": pool, "operator": "Exists"}],
            "affinity": anti,
        }
        create_job(
            cluster.api,
            namespace,
            JobBuilder(name).role("worker", 3, gpus=1, template=template).build(),
        )
        started = time.monotonic()
        st = wait_for(
            lambda: (
                (s := status(cluster.api, namespace, name)).get("reason") == "Unschedulable" and s
            ),
            timeout=30,
            what="the job's reason Unschedulable",
        )
        message = running_condition(st)["message"]
        assert "cannot be scheduled" in message and "anti-affinity" in message, message
        print(f"\nUnschedulable shown after {time.monotonic() - started:.1f}s: {message}")
    finally:
        with contextlib.suppress(client.ApiException):
            client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object(
                "dtjob.io", "v1alpha1", namespace, "distributedtrainingjobs", name
            )
        for node in nodes:
            with contextlib.suppress(client.ApiException):
                core.delete_node(node)


def test_a_node_selector_that_matches_no_node_is_named_not_the_gpus(cluster, namespace) -> None:
    name = unique("nosel")
    template = {"nodeSelector": {"pool": "no-such-pool"}}
    create_job(
        cluster.api,
        namespace,
        JobBuilder(name).role("worker", 2, gpus=1, template=template).build(),
    )
    st = wait_for(
        lambda: (s := status(cluster.api, namespace, name)).get("reason") == "Inadmissible" and s,
        timeout=30,
        what="the job Inadmissible",
    )
    admitted = next(c for c in st["conditions"] if c["type"] == "Admitted")
    assert "nodeSelector (pool=no-such-pool) matches none of the" in admitted["message"]
    assert "even if empty" not in admitted["message"]
    print(f"\nnodeSelector matching nothing: {admitted['message']}")


def creating(pod: client.V1Pod) -> bool:
    statuses = (pod.status and pod.status.container_statuses) or []
    return any(
        cs.state.waiting and cs.state.waiting.reason == "ContainerCreating" for cs in statuses
    )


@contextlib.contextmanager
def kubelet_failing_mounts(core: client.CoreV1Api, ns: str, job: str) -> Iterator[set[str]]:
    """Play the kubelet of a node that cannot mount a pod's Secret volume: a FailedMount
    event on every pod of `job` held in ContainerCreating (each new gang too), the way the
    kubelet records it. Yields the uids of the pods it reported so far."""
    reported: set[str] = set()
    stop = threading.Event()

    def post(pod: client.V1Pod) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = pod.metadata
        body = {
            "metadata": {"generateName": f"{meta.name}.", "namespace": ns},
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "name": meta.name,
                "namespace": ns, "uid": meta.uid,
            },
            "type": "Warning", "reason": "FailedMount", "message": NO_SECRET,
            "source": {"component": "kubelet", "host": pod.spec.node_name},
            "reportingComponent": "kubelet", "reportingInstance": pod.spec.node_name,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        core.create_namespaced_event(ns, body)

    def loop() -> None:
        while not stop.wait(0.3):
            for pod in core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job}").items:
                if pod.metadata.uid not in reported and creating(pod):
                    post(pod)
                    reported.add(pod.metadata.uid)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield reported
    finally:
        stop.set()
        thread.join(timeout=10)


def test_a_volume_that_cannot_be_mounted_is_named_then_fails_after_the_retry_limit(
    cluster, namespace
) -> None:
    core = cluster.core
    name = unique("mount")
    job = (
        JobBuilder(name)
        .role("worker", 2, gpus=1)
        .spec(trainer={"image": STUCK_CREATING, "command": ["train"]})
        .run_policy(admissionRetryLimit=1)
    )
    with kubelet_failing_mounts(core, namespace, name) as reported:
        started = time.monotonic()
        create_job(cluster.api, namespace, job.build())
        wait_for(
            lambda: reported,
            timeout=30,
            what="a pod held in ContainerCreating (stage hack/kwok/pod-container-creating.yaml; "
            "a cluster started before it existed needs a restart)",
        )
        st = wait_for(
            lambda: (
                (s := status(cluster.api, namespace, name)).get("reason") == "FailedMount" and s
            ),
            timeout=30,
            what="the job's reason FailedMount",
        )
        shown = time.monotonic() - started
        message = running_condition(st)["message"]
        assert f"pod {name}-worker-" in message and 'secret "nope" not found' in message, message
        # The second gang (new pods, new uids) is stuck the same way: then the job fails.
        st = wait_phase(cluster.api, namespace, name, "Failed", timeout=60)
        failed_after = time.monotonic() - started
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailedMount" and st["reason"] == "FailedMount"
    assert "admissionRetryLimit" in failed["message"], failed["message"]
    assert 'secret "nope" not found' in failed["message"], failed["message"]
    assert st["admission"]["requeues"] == 1 and len(reported) == 4  # two gangs of two
    # One event per change of reason, not one per pass.
    seen = wait_for(lambda: events_for(core, namespace, name, "FailedMount"), what="the event")
    assert len(seen) <= 3, [e.message for e in seen]
    print(
        f"\nFailedMount shown after {shown:.1f}s; Failed after {failed_after:.1f}s "
        f"(timeout 6s, 1 re-queue): {failed['message']}"
    )
