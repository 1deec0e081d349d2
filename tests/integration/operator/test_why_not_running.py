"""The job says why it is not running, in its own status, on the real control plane: an
image KWOK cannot "pull" (hack/kwok/pod-image-pull-backoff.yaml) and a pod the scheduler
cannot place. The operator here has a short pods-ready timeout so re-queues end quickly."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from helpers.jobs import JobBuilder, create_job, status, wait_phase
from helpers.kube import events_for, fake_gpu_node, node_ready, unique, wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]
UNPULLABLE = "registry.invalid/unpullable:1"
JOB_LABEL = "dtjob.io/job-name"
OPERATOR_ENV = {
    "DTJOB_TRAINER_IMAGE": "dtjob/trainer:test",
    "DTJOB_PODS_READY_TIMEOUT_SECONDS": "6",
    "DTJOB_REQUEUE_BACKOFF_SECONDS": "1",
    "DTJOB_RESYNC_SECONDS": "2",
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
    assert 1 <= len(events_for(cluster.core, namespace, name, "ImagePullBackOff")) <= 3
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
