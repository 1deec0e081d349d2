"""Two operator replicas at once (DTJOB_STANDALONE=false): a Lease elects one, which alone
reconciles and admits; the quota is never exceeded and no gang is admitted twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from integration.operator.test_admission import OPERATOR_ENV, Kubelet, gang_job, set_quota
from kubernetes import client

from helpers.jobs import create_job, status, wait_phase
from helpers.kube import unique, wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]


def test_two_replicas_never_admit_twice(cluster, crd, namespace, tmp_path) -> None:  # type: ignore[no-untyped-def]
    core = cluster.core
    lease = unique("dtjob-leader")
    env = {
        **OPERATOR_ENV,
        "DTJOB_STANDALONE": "false",
        "DTJOB_PEERING_NAME": lease,
        "DTJOB_LEADER_ELECTION_NAMESPACE": namespace,
        "DTJOB_LEADER_LEASE_SECONDS": "6",
        "DTJOB_NAMESPACES": namespace,
    }
    replicas = [OperatorProcess(cluster.kubeconfig, tmp_path / f"op{i}.log", env) for i in range(2)]
    for r in replicas:
        r.start()
    try:
        set_quota(core, namespace, 8)
        names = [f"r{i}" for i in range(8)]
        with Kubelet(core, namespace, run_for="2s") as kubelet:
            for name in names:
                create_job(cluster.api, namespace, gang_job(name, 2, 2))
            coord = client.CoordinationV1Api(cluster.api)

            def holder_now() -> str | None:
                try:
                    return coord.read_namespaced_lease(lease, namespace).spec.holder_identity
                except client.ApiException:
                    return None

            holder = wait_for(holder_now, what="a leader")
            # Halfway through, the leader dies; the other replica takes over.
            wait_phase(cluster.api, namespace, names[1], "Succeeded", timeout=120)
            leader = next(r for r in replicas if r.proc and str(r.proc.pid) in holder)
            leader.kill()
            for name in names:
                wait_phase(cluster.api, namespace, name, "Succeeded", timeout=180)
            new_holder = coord.read_namespaced_lease(lease, namespace).spec.holder_identity
        assert new_holder != holder
        assert 0 < kubelet.max_gpus <= 8
        for name in names:
            assert status(cluster.api, namespace, name).get("restarts", 0) == 0
        events = core.list_namespaced_event(namespace).items
        admitted = [e for e in events if e.reason == "Admitted"]
        # At most one Admitted event per job: a second replica admitting again would add
        # another. The event follows the status patch, so a leader killed between the two
        # loses the events of the admissions in flight (events are best-effort): one pass
        # admits up to two of these gangs (quota 8, 4 GPUs each), and the kill comes right
        # when r1 ends, which is when r2 and r3 are admitted together. The new leader must
        # not admit those jobs again, which the counts and restarts == 0 show.
        per_job: dict[str, int] = {}
        for e in admitted:
            per_job[e.involved_object.name] = per_job.get(e.involved_object.name, 0) + 1
        twice = [n for n, count in per_job.items() if count > 1]
        assert not twice, _explain(twice, admitted, tmp_path)
        assert len(per_job) >= len(names) - 2, per_job
    finally:
        for r in replicas:
            r.stop()


def _explain(names: list[str], admitted: list[client.CoreV1Event], logs: Path) -> str:
    """What a failure must show to be understood from CI's output alone: the events and
    every operator log line about the jobs admitted twice."""
    lines = [f"admitted more than once: {names}"]
    for e in admitted:
        if e.involved_object.name in names:
            lines.append(f"event {e.metadata.name} {e.first_timestamp} {e.involved_object.uid} "
                         f"{e.source} {e.reporting_component} {e.count} {e.message!r}")  # fmt: skip
    for log in sorted(logs.glob("op*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if any(f"/{n}" in line or f" {n} " in line for n in names) or "leader" in line:
                lines.append(f"{log.name}: {line[:300]}")
    return "\n".join(lines[-200:])
