"""Fair sharing through the real Kueue (its Configuration's `fairSharing`, which an admin turns
on by restarting Kueue): a cohort's 16 GPUs belong to a ClusterQueue with no workload of its
own, and two teams' ClusterQueues own none, so each team only borrows. Team A takes all 16
with two 8-GPU jobs; team B's 8-GPU job then takes A's excess share back. Without fair
sharing it would wait (a borrowing ClusterQueue cannot reclaim); with it, Kueue preempts one
of A's gangs, and dtjob stops that gang whole, says why, counts one preemption, lets B's gang
start only once A's pods are gone, and starts A's again when B is done."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from integration.kueue.conftest import PODS_READY
from integration.kueue.test_kueue_cohort import Gangs, teams
from integration.kueue.test_kueue_jobs import FLAVOR_LABELS, operator, queued_job
from integration.kueue.test_kueue_runs import custom

from helpers.jobs import create_job, exit_pod, job_pods, status, wait_phase, wait_pods_running
from helpers.kube import unique, wait_for
from helpers.kueue import GROUP, VERSION, Kueue

pytestmark = [pytest.mark.integration]
__all__ = ["operator", "teams"]  # fixtures shared with test_kueue_jobs and test_kueue_cohort
STRATEGIES = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]  # Kueue's defaults


@pytest.fixture
def fair_kueue(kueue: Kueue) -> Iterator[Kueue]:
    """The package's Kueue with fair sharing on for this test, as it was afterwards."""
    kueue.reconfigure(wait_for_pods_ready=PODS_READY, fair_sharing={
        "preemptionStrategies": STRATEGIES})  # fmt: skip
    yield kueue
    kueue.reconfigure(wait_for_pods_ready=PODS_READY)


def borrowing_cohort(cluster: Any, cohort: str, teams: dict[str, str], gpus: int) -> None:
    """A flavor; a ClusterQueue owning `gpus` GPUs in `cohort` with no LocalQueue; per team
    (namespace -> ClusterQueue) a ClusterQueue of none in `cohort` and a LocalQueue "team"."""
    api = custom(cluster)
    flavor = f"{cohort}-gpu"
    api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
        "metadata": {"name": flavor}, "spec": {"nodeLabels": FLAVOR_LABELS}})  # fmt: skip
    for cq, owned in [(f"{cohort}-pool", gpus), *((cq, 0) for cq in teams.values())]:
        api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {}, "cohortName": cohort,
                "preemption": {"reclaimWithinCohort": "Any"},
                "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{
                    "name": flavor,
                    "resources": [{"name": "nvidia.com/gpu", "nominalQuota": owned}]}]}],
            },
        })  # fmt: skip
    for ns, cq in teams.items():
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": ns},
            "spec": {"clusterQueue": cq}})  # fmt: skip


def _uids(core: Any, ns: str, name: str) -> set[str]:
    return {p.metadata.uid for p in job_pods(core, ns, name)}


@pytest.mark.usefixtures("operator")
def test_fair_sharing_takes_one_gang_back_from_the_team_over_its_share(
    cluster: Any, fair_kueue: Kueue, teams: tuple[str, str]
) -> None:
    a, b = teams
    cohort = unique("fair")
    borrowing_cohort(cluster, cohort, {a: f"{cohort}-a", b: f"{cohort}-b"}, gpus=16)
    a1, a2, b1 = unique("a1"), unique("a2"), unique("b1")
    sizes = {(a, a1): (2, 4), (a, a2): (2, 4), (b, b1): (2, 4)}
    with Gangs(cluster.core, sizes) as gangs:
        for name in (a1, a2):
            create_job(cluster.api, a, queued_job(name, 2, 4))
        for name in (a1, a2):
            wait_pods_running(cluster.core, a, name, 2, timeout=90)
            wait_phase(cluster.api, a, name, "Running")
        before = {name: _uids(cluster.core, a, name) for name in (a1, a2)}

        create_job(cluster.api, b, queued_job(b1, 2, 4))
        wait_for(
            lambda: any(status(cluster.api, a, n).get("phase") == "Suspended" for n in (a1, a2)),
            90, what="one of team A's gangs preempted by fair sharing",
            explain=lambda: str([status(cluster.api, a, n) for n in (a1, a2)]),
        )  # fmt: skip
        evicted = next(n for n in (a1, a2) if status(cluster.api, a, n)["phase"] == "Suspended")
        kept = a2 if evicted == a1 else a1
        st = status(cluster.api, a, evicted)
        suspended = next(c for c in st["conditions"] if c["type"] == "Suspended")
        assert suspended["reason"] == "Preempted", suspended
        # Kueue's own words for the cause reach the job.
        assert "Fair Sharing within the cohort" in suspended["message"], suspended
        wait_pods_running(cluster.core, b, b1, 2, timeout=90)
        assert job_pods(cluster.core, a, evicted) == []
        # The other gang of A was left alone: the same pods, never restarted.
        assert _uids(cluster.core, a, kept) == before[kept]
        assert status(cluster.api, a, kept)["phase"] == "Running"
        assert status(cluster.api, a, evicted)["admission"]["preemptions"] == 1

        for pod in job_pods(cluster.core, b, b1):
            exit_pod(cluster.core, b, pod.metadata.name, 0)
        wait_phase(cluster.api, b, b1, "Succeeded")
        wait_pods_running(cluster.core, a, evicted, 2, timeout=90)  # its share is free again
        resumed = wait_phase(cluster.api, a, evicted, "Running", timeout=60)
    assert not gangs.errors, gangs.errors[:3]
    assert gangs.most_gpus == 16 and not gangs.too_many, (gangs.most_gpus, gangs.too_many)
    assert resumed["admission"]["preemptions"] == 1, resumed["admission"]
