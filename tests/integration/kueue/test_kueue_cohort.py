"""Cohort borrowing through the real Kueue: two teams' ClusterQueues of 4 GPUs each share a
cohort; a dtjob job of team A borrows team B's idle GPUs and runs; team B's job then
reclaims them through Kueue's preemption. The borrower's gang is stopped whole (SIGTERM:
the trainer checkpoints), waits Suspended with Kueue's reason, and a fresh gang starts once
the lender's job is done. The cohort's 8 GPUs are never overcommitted: the lender's gang
is made only once the borrower's is gone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from integration.kueue.test_kueue_jobs import FLAVOR_LABELS, operator, queued_job
from integration.kueue.test_kueue_runs import custom

from helpers.jobs import create_job, exit_pod, job_pods, status, wait_phase, wait_pods_running
from helpers.kube import create_namespace, unique
from helpers.kueue import GROUP, VERSION, Kueue
from helpers.sampler import Sampler

pytestmark = [pytest.mark.integration]
__all__ = ["operator"]  # the module's operator fixture, shared with test_kueue_jobs


def cohort_queues(cluster: Any, cohort: str, teams: dict[str, str], gpus: int) -> dict[str, str]:
    """One shared flavor; per team (namespace -> ClusterQueue name) a ClusterQueue of `gpus`
    GPUs in `cohort` that reclaims what it lent, and a LocalQueue "team"."""
    api = custom(cluster)
    flavor = f"{cohort}-gpu"
    api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
        "metadata": {"name": flavor}, "spec": {"nodeLabels": FLAVOR_LABELS}})  # fmt: skip
    for ns, cq in teams.items():
        api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {}, "cohortName": cohort,
                "preemption": {"reclaimWithinCohort": "Any"},
                "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{
                    "name": flavor,
                    "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}],
            },
        })  # fmt: skip
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": ns},
            "spec": {"clusterQueue": cq}})  # fmt: skip
    return teams


class Gangs(Sampler):
    """At every sample, the GPUs the jobs' live pods hold: the cohort's quota is never
    exceeded (the borrower's gang is gone before the lender's is made), and no job has
    more pods than its gang."""

    def __init__(self, core: Any, jobs: dict[tuple[str, str], tuple[int, int]]) -> None:
        super().__init__()
        self.core, self.jobs = core, jobs  # (namespace, job) -> (pods, GPUs a pod)
        self.most_gpus = 0
        self.too_many: list[str] = []

    def sample(self) -> None:
        held = 0
        for (ns, name), (size, gpus) in self.jobs.items():
            # A pod that has ended holds no GPU (the lender's finished pods stay a while).
            pods = job_pods(self.core, ns, name)
            live = sum(p.status.phase not in ("Succeeded", "Failed") for p in pods)
            held += live * gpus
            if live > size:
                self.too_many.append(f"{name}: {live}/{size} pods")
        self.most_gpus = max(self.most_gpus, held)


@pytest.fixture
def teams(cluster: Any) -> Iterator[tuple[str, str]]:
    """Two teams' namespaces, deleted afterwards (a failure must not leave pods behind)."""
    a, b = create_namespace(cluster.core, "ka"), create_namespace(cluster.core, "kb")
    yield a, b
    for ns in (a, b):
        cluster.core.delete_namespace(ns)


@pytest.mark.usefixtures("operator")
def test_a_borrowing_job_runs_on_idle_gpus_and_gives_them_back_when_the_lender_needs_them(
    cluster: Any, kueue: Kueue, teams: tuple[str, str]
) -> None:
    a, b = teams
    cohort = unique("co")
    cohort_queues(cluster, cohort, {a: f"{cohort}-a", b: f"{cohort}-b"}, gpus=4)
    borrower, lender = unique("borrower"), unique("lender")
    with Gangs(cluster.core, {(a, borrower): (2, 4), (b, lender): (2, 2)}) as gangs:
        create_job(cluster.api, a, queued_job(borrower, 2, 4))  # 8 GPUs: 4 of them borrowed
        wait_pods_running(cluster.core, a, borrower, 2, timeout=90)
        running = wait_phase(cluster.api, a, borrower, "Running")
        admitted = next(c for c in running["conditions"] if c["type"] == "Admitted")
        assert f"ClusterQueue {cohort}-a" in admitted["message"], admitted

        create_job(cluster.api, b, queued_job(lender, 2, 2))  # B's own 4 GPUs, lent out
        stopped = wait_phase(cluster.api, a, borrower, "Suspended", timeout=90)
        suspended = next(c for c in stopped["conditions"] if c["type"] == "Suspended")
        # Kueue's reason travels to the job: a user never reads the Workload to learn it.
        assert suspended["reason"] == "Preempted", suspended
        assert "Kueue evicted it (Preempted)" in suspended["message"], suspended
        assert "reclamation within the cohort" in suspended["message"], suspended
        lender_pods = wait_pods_running(cluster.core, b, lender, 2, timeout=90)
        assert job_pods(cluster.core, a, borrower) == []
        waiting = status(cluster.api, a, borrower)
        assert waiting["phase"] == "Suspended", waiting

        for pod in lender_pods:
            exit_pod(cluster.core, b, pod.metadata.name, 0)
        wait_phase(cluster.api, b, lender, "Succeeded")
        # The quota is back: the borrower's fresh gang starts, and says it resumed.
        wait_pods_running(cluster.core, a, borrower, 2, timeout=90)
        resumed = wait_phase(cluster.api, a, borrower, "Running", timeout=60)
    # The sampler's errors first: a sampler that could not list pods also sees too few GPUs.
    assert not gangs.errors, gangs.errors[:3]
    assert gangs.most_gpus == 8 and not gangs.too_many, (gangs.most_gpus, gangs.too_many)
    assert any(c["type"] == "Suspended" and c["reason"] == "Resumed"
               for c in resumed["conditions"]), resumed["conditions"]  # fmt: skip
