"""Placement that is kept (issue 28): the admission gives every pod of a gang a node and
the pod is created pinned there, so gangs admitted together never wait on each other's
room. Three gangs (2 x 4, 2 x 4 and 1 x 8 GPUs) fill the 4 fake nodes of 8 GPUs exactly;
before, the scheduler spread the small gangs' pods and left the 8-GPU pod Pending in 2 of
4 tries. With the nodes labelled into two racks of two: a gang that requires a rack runs
inside the one with room and records it, a gang no rack holds waits naming the level, and
preemption for a rack-bound gang stops the job of one rack only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dtjob_operator.admission.snapshot import pinned_node
from helpers.jobs import JobBuilder, create_job, job_pods, status, wait_phase
from helpers.kube import gpu_pods, wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]
RACK, HOST = "placement.dtjob.test/rack", "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def operator(cluster, crd, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:t", "DTJOB_RESYNC_SECONDS": "2",
           "DTJOB_TOPOLOGY_LEVELS": f"{RACK},{HOST}"}  # fmt: skip
    proc = OperatorProcess(cluster.kubeconfig, log, env)
    proc.start()
    yield proc
    proc.stop()


@pytest.mark.usefixtures("operator")
def test_gangs_admitted_together_all_run_on_the_nodes_they_were_given(
    local_cluster: Any, namespace: str
) -> None:
    core = local_cluster.core
    wait_for(lambda: not gpu_pods(core), 90, what="no GPU pod left by earlier tests")
    gangs = {"small-1": (2, 4), "small-2": (2, 4), "big": (1, 8)}
    for name, (pods, gpus) in gangs.items():
        job = JobBuilder(name).strategy("DataParallel").role("worker", pods, gpus=gpus).build()
        create_job(local_cluster.api, namespace, job)
    for name in gangs:
        wait_phase(local_cluster.api, namespace, name, "Running", timeout=60)
    for name in gangs:
        for pod in job_pods(core, namespace, name):
            raw = core.api_client.sanitize_for_serialization(pod)
            assert pinned_node(raw) == pod.spec.node_name, (pod.metadata.name, raw["spec"])


@pytest.fixture
def racks(local_cluster: Any) -> Iterator[dict[str, str]]:
    """The 4 fake GPU nodes labelled into racks r0 (first two) and r1 (node -> rack), once no
    GPU pod of an earlier test is left; the labels go after."""
    core = local_cluster.core
    nodes = sorted(
        n.metadata.name
        for n in core.list_node(label_selector="type=kwok,nvidia.com/gpu.present=true").items
    )
    assert len(nodes) == 4, nodes
    wait_for(lambda: not gpu_pods(core), 90, what="no GPU pod left by earlier tests")
    placed = {node: f"r{i // 2}" for i, node in enumerate(nodes)}
    for node, rack in placed.items():
        core.patch_node(node, {"metadata": {"labels": {RACK: rack}}})
    yield placed
    for node in placed:
        core.patch_node(node, {"metadata": {"labels": {RACK: None}}})


def on_host(name: str, pods: int, gpus: int, host: str, **spec: Any) -> dict[str, Any]:
    template = {"nodeSelector": {HOST: host}}
    job = JobBuilder(name).strategy("DataParallel").role("worker", pods, gpus=gpus,
                                                         template=template)  # fmt: skip
    return job.spec(**spec).build()


def rack_bound(name: str, pods: int, gpus: int, **spec: Any) -> dict[str, Any]:
    job = JobBuilder(name).strategy("DataParallel").role("worker", pods, gpus=gpus)
    return job.spec(placement={"topology": {"required": RACK}}, **spec).build()


def admitted(st: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == "Admitted"), {})


@pytest.mark.usefixtures("operator")
def test_a_gang_that_requires_a_rack_runs_in_the_rack_with_room_and_says_which(
    local_cluster: Any, namespace: str, racks: dict[str, str]
) -> None:
    """r0 has one host taken (8 free), r1 is empty (16 free). Of the 2 x 8 GPUs the nodes
    hold, only r1's make one rack: first fit by name took a host of each rack."""
    api, core = local_cluster.api, local_cluster.core
    first = sorted(racks)[0]
    create_job(api, namespace, on_host("filler", 1, 8, first))
    wait_phase(api, namespace, "filler", "Running", timeout=60)
    create_job(api, namespace, rack_bound("packed", 2, 8))
    st = wait_phase(api, namespace, "packed", "Running", timeout=60)
    hosts = [p.spec.node_name for p in sorted(job_pods(core, namespace, "packed"),
                                               key=lambda p: p.metadata.name)]  # fmt: skip
    assert {racks[h] for h in hosts} == {"r1"} and len(set(hosts)) == 2, hosts
    assert st["admission"]["domain"] == f"{RACK}=r1"
    assert admitted(st)["message"] == f"the whole gang fits, placed in {RACK}=r1"


@pytest.mark.usefixtures("operator")
def test_a_gang_no_rack_can_hold_waits_naming_the_level(
    local_cluster: Any, namespace: str, racks: dict[str, str]
) -> None:
    """3 x 8 GPUs fit the cluster's 32 but no rack's 16: the job is Inadmissible and says
    which level was too small; a level no node carries is said too. Neither holds a pod."""
    api, core = local_cluster.api, local_cluster.core
    create_job(api, namespace, rack_bound("huge", 3, 8))
    nowhere = rack_bound("nowhere", 1, 1)
    nowhere["spec"]["placement"]["topology"]["required"] = "placement.dtjob.test/none"
    create_job(api, namespace, nowhere)

    def said(name: str) -> dict[str, Any]:
        return admitted(status(api, namespace, name))

    wait_for(lambda: said("huge").get("reason") == "Inadmissible", 30, what="huge judged")
    assert f"inside one {RACK}" in said("huge")["message"]
    assert "none of the 2 could hold them even if empty (largest: 16" in said("huge")["message"]
    wait_for(lambda: said("nowhere").get("reason") == "Inadmissible", 30, what="nowhere judged")
    assert "no Ready node it may use carries that label" in said("nowhere")["message"]
    assert status(api, namespace, "huge")["phase"] == "Queued"
    assert not job_pods(core, namespace, "huge") and not job_pods(core, namespace, "nowhere")


@pytest.mark.usefixtures("operator")
def test_preemption_for_a_rack_bound_gang_stops_the_jobs_of_one_rack_only(
    local_cluster: Any, namespace: str, racks: dict[str, str], priority_classes: dict[str, str]
) -> None:
    """`low-a` holds one host of r0; `low-b1` and `low-b2`, newer, hold both hosts of r1.
    An urgent 2 x 8 gang that requires a rack needs one whole rack: stopping low-a frees
    r0. Plain victim order (newest first) would stop low-b2, then low-b1 as well."""
    api = local_cluster.api
    hosts = sorted(racks)
    low = {"priorityClassName": priority_classes["low"]}
    for name, host in (("low-a", hosts[0]), ("low-b1", hosts[2]), ("low-b2", hosts[3])):
        create_job(api, namespace, on_host(name, 1, 8, host, **low))
        wait_phase(api, namespace, name, "Running", timeout=60)
    urgent = rack_bound("urgent", 2, 8, priorityClassName=priority_classes["urgent"])
    create_job(api, namespace, urgent)
    st = wait_phase(api, namespace, "urgent", "Running", timeout=60)
    assert st["admission"]["domain"] == f"{RACK}=r0"
    assert status(api, namespace, "low-a")["phase"] == "Suspended"
    for spared in ("low-b1", "low-b2"):
        assert status(api, namespace, spared)["phase"] == "Running", spared
        assert not status(api, namespace, spared).get("admission", {}).get("preemptions")
