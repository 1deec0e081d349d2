"""Leader election judged by the replica's own clock, on the real API server. The test plays
another replica whose clock is skewed by an hour: a silent one whose renewTime lies in the
future is replaced after one lease duration; a live one whose renewTime lies in the past
keeps the lead (comparing renewTime with local wall time would get both wrong)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client

from helpers.jobs import JobBuilder, create_job, status
from helpers.kube import unique, wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]
LEASE_SECONDS = 6


def micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(name: str, renew: datetime) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": "skewed-replica",
            "leaseDurationSeconds": LEASE_SECONDS,
            "acquireTime": micro(renew),
            "renewTime": micro(renew),
            "leaseTransitions": 0,
        },
    }


@pytest.fixture
def replica(cluster, crd, namespace, tmp_path: Path) -> Iterator[tuple[OperatorProcess, str]]:  # type: ignore[no-untyped-def]
    lease = unique("leader")
    env = {
        "DTJOB_TRAINER_IMAGE": "dtjob/trainer:test",
        "DTJOB_STANDALONE": "false",
        "DTJOB_PEERING_NAME": lease,
        "DTJOB_LEADER_ELECTION_NAMESPACE": namespace,
        "DTJOB_LEADER_LEASE_SECONDS": str(LEASE_SECONDS),
        "DTJOB_NAMESPACES": namespace,
    }
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", env)
    yield proc, lease
    proc.stop()


def holder(coord: client.CoordinationV1Api, ns: str, name: str) -> str:
    return str(coord.read_namespaced_lease(name, ns).spec.holder_identity)


def test_a_silent_leader_with_its_clock_ahead_is_replaced(cluster, namespace, replica) -> None:  # type: ignore[no-untyped-def]
    proc, lease = replica
    coord = client.CoordinationV1Api(cluster.api)
    coord.create_namespaced_lease(
        namespace, lease_body(lease, datetime.now(UTC) + timedelta(hours=1))
    )
    proc.start()
    wait_for(lambda: holder(coord, namespace, lease) != "skewed-replica", 30, what="take-over")
    job = unique("j")
    create_job(cluster.api, namespace, JobBuilder(job).role("worker", 1, gpus=1).build())
    wait_for(lambda: status(cluster.api, namespace, job).get("phase"), 30, what="a reconcile")


def test_a_live_leader_with_its_clock_behind_keeps_the_lead(cluster, namespace, replica) -> None:  # type: ignore[no-untyped-def]
    proc, lease = replica
    coord = client.CoordinationV1Api(cluster.api)
    renew = datetime.now(UTC) - timedelta(hours=1)
    coord.create_namespaced_lease(namespace, lease_body(lease, renew))
    stop = threading.Event()

    def keep_renewing() -> None:  # every 2 s, with a clock an hour behind
        t = renew
        while not stop.wait(2):
            t += timedelta(seconds=2)
            current = coord.read_namespaced_lease(lease, namespace)
            if current.spec.holder_identity != "skewed-replica":
                return
            current.spec.renew_time = t
            coord.replace_namespaced_lease(lease, namespace, current)

    renewer = threading.Thread(target=keep_renewing, daemon=True)
    renewer.start()
    try:
        proc.start()
        job = unique("j")
        create_job(cluster.api, namespace, JobBuilder(job).role("worker", 1, gpus=1).build())
        stop.wait(4 * LEASE_SECONDS)
        assert holder(coord, namespace, lease) == "skewed-replica"
        assert not status(cluster.api, namespace, job).get("phase"), "a non-leader wrote"
    finally:
        stop.set()
        renewer.join()
    # The other replica stops renewing: ours takes over after one duration, and acts.
    wait_for(lambda: holder(coord, namespace, lease) != "skewed-replica", 30, what="take-over")
    wait_for(lambda: status(cluster.api, namespace, job).get("phase"), 30, what="a reconcile")
