"""Accelerators of any vendor and other extended resources: the spec fields, the pod's
resources, and admission counting every one of them against quotas and nodes."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.builders import a_job

from dtjob_api.validation import validate_job
from dtjob_operator.admission.fit import Node, PodDemand, Quota, place, quota_shortfall
from dtjob_operator.admission.messages import accelerator, capacity_short
from dtjob_operator.admission.resources import (
    CPU,
    GPU,
    PODS,
    gpu_units,
    pod_requests,
    quota_amounts,
)
from dtjob_operator.admission.snapshot import node_view
from dtjob_operator.builders import build_pod
from dtjob_operator.builders.pod import resources, shm_size
from dtjob_operator.envcontract import resolve_backend
from dtjob_operator.settings import OperatorSettings

SETTINGS = OperatorSettings()
RDMA = "rdma/hca_shared_devices_a"
EFA = "vpc.amazonaws.com/efa"


def role_job(**role: Any) -> dict[str, Any]:
    return {"strategy": {"type": "DataParallel"}, "roles": {"worker": role}}


def pod_resources(**role: Any) -> dict[str, Any]:
    job = a_job().with_workers(1, **role).job()
    pod = build_pod(job, "worker", 0, 0, SETTINGS)
    return pod["spec"]["containers"][0]["resources"]  # type: ignore[no-any-return]


# -- spec ---------------------------------------------------------------------------------


def test_gpu_resource_defaults_to_nvidia() -> None:
    assert pod_resources(gpus=2)["limits"] == {GPU: "2"}


def test_gpus_are_requested_as_the_role_gpu_resource() -> None:
    res = pod_resources(gpus=1, gpuResource="nvidia.com/mig-1g.10gb", cpu="4")
    assert res["requests"] == res["limits"] == {"cpu": "4", "nvidia.com/mig-1g.10gb": "1"}


def test_extended_resources_go_to_requests_and_limits() -> None:
    res = pod_resources(
        gpus=8,
        gpuResource="amd.com/gpu",
        extendedResources={RDMA: 1, EFA: "4", "hugepages-2Mi": "1Gi"},
    )
    expected = {"amd.com/gpu": "8", RDMA: "1", EFA: "4", "hugepages-2Mi": "1Gi"}
    assert res["requests"] == res["limits"] == expected


def test_gpu_defaults_follow_gpus_whatever_the_resource_name() -> None:
    job = a_job().with_workers(1, gpus=4, gpuResource="amd.com/gpu").job()
    assert resolve_backend(job.spec) == "nccl"
    assert shm_size(job, job.spec.roles.worker, SETTINGS) == "4Gi"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("role", "field", "words"),
    [
        ({"gpuResource": "gpu"}, "spec.roles.worker.gpuResource", "should match"),
        ({"gpuResource": "kubernetes.io/gpu"}, "spec.roles.worker.gpuResource", "extended"),
        ({"extendedResources": {"cpu": "1"}}, "spec.roles.worker.extendedResources", "cpu"),
        ({"extendedResources": {"memory": "1Gi"}}, "spec.roles.worker.extendedResources", "cpu"),
        (
            {"extendedResources": {"requests.rdma/x": 1}},
            "spec.roles.worker.extendedResources",
            "extended resource names",
        ),
        ({"extendedResources": {GPU: 1}}, "spec.roles.worker.extendedResources", "set gpus"),
        ({"extendedResources": {RDMA: "lots"}}, "spec.roles.worker.extendedResources", "quantity"),
    ],
)
def test_bad_resource_names_are_refused_naming_the_field(
    role: dict[str, Any], field: str, words: str
) -> None:
    errors = validate_job(role_job(**role))
    assert any(e.field.startswith(field) and words in e.message for e in errors), errors


def test_good_resource_names_are_accepted() -> None:
    role = {
        "gpus": 1,
        "gpuResource": "nvidia.com/mig-3g.40gb",
        "extendedResources": {RDMA: 1, EFA: 4, "hugepages-1Gi": "2Gi", GPU: 1},
    }
    assert validate_job(role_job(**role)) == []


def test_resources_is_empty_for_a_bare_role() -> None:
    job = a_job().with_workers(1).job()
    assert resources(job.spec.roles.worker) == {}  # type: ignore[arg-type]


# -- admission ----------------------------------------------------------------------------


def test_quota_counts_every_extended_resource_but_storage() -> None:
    hard = {
        "requests.nvidia.com/gpu": "16",
        "requests.amd.com/gpu": "8",
        f"requests.{RDMA}": "2",
        "requests.hugepages-2Mi": "4Gi",
        "requests.storage": "1Ti",
        "limits.cpu": "10",
        "count/services": "5",
    }
    assert quota_amounts(hard) == {
        GPU: 16,
        "amd.com/gpu": 8,
        RDMA: 2,
        "hugepages-2Mi": 4 * 2**30,
    }


def test_a_gang_needing_more_rdma_than_the_quota_falls_short() -> None:
    pod_spec = build_pod(
        a_job().with_workers(1, extendedResources={RDMA: 1}).job(), "worker", 0, 0, SETTINGS
    )["spec"]
    need = pod_requests(pod_spec)
    assert need[RDMA] == 1
    hard = quota_amounts({f"requests.{RDMA}": "1"})
    assert quota_shortfall({RDMA: 2 * need[RDMA]}, hard) == [RDMA]
    assert quota_shortfall(need, hard) == []


def node(name: str, **alloc: int) -> Node:
    amounts = {CPU: 64000, PODS: 110, **alloc}
    return Node(name, amounts, dict(amounts))


def test_a_node_without_the_resource_cannot_host_the_pod() -> None:
    wants = PodDemand({"amd.com/gpu": 2, PODS: 1})
    assert not place([wants], [node("nvidia", **{GPU: 8})])
    amd = node("amd")
    amd.allocatable = amd.free = {**amd.free, "amd.com/gpu": 8}
    assert place([wants], [node("nvidia", **{GPU: 8}), amd])
    assert amd.free["amd.com/gpu"] == 6


def test_node_allocatable_of_extended_resources_is_read() -> None:
    raw = {
        "metadata": {"name": "n"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "8", RDMA: "4", "hugepages-2Mi": "1Gi"},
        },
    }
    view = node_view(raw)
    assert view is not None and view.free[RDMA] == 4 and view.free["hugepages-2Mi"] == 2**30


def test_pods_with_most_devices_are_placed_first() -> None:
    # Largest first: the 4-device pod takes the big node, the 1-device pod the small one.
    big, small = node("a-small", **{"amd.com/gpu": 1}), node("b-big", **{"amd.com/gpu": 4})
    gang = [PodDemand({"amd.com/gpu": 1, PODS: 1}), PodDemand({"amd.com/gpu": 4, PODS: 1})]
    assert place(gang, [big, small])


def test_messages_speak_of_the_gangs_own_accelerator() -> None:
    gang = [PodDemand({"amd.com/gpu": 4, RDMA: 1, PODS: 1})] * 2
    assert accelerator(gang) == "amd.com/gpu"
    assert accelerator([PodDemand({RDMA: 1, PODS: 1})]) == RDMA
    assert accelerator([PodDemand({CPU: 1000, PODS: 1})]) == GPU
    text = capacity_short(gang, [node("n", **{"amd.com/gpu": 2})])
    assert "2 pods of 4 amd.com/gpu" in text and "free amd.com/gpu per Ready node: 2" in text


def test_quota_fold_keeps_extended_resources() -> None:
    quota = Quota(hard={RDMA: 1}, room={RDMA: 0})
    assert quota_shortfall({RDMA: 1}, quota.room) == [RDMA]


def test_gpus_of_any_vendor_count_as_gpus() -> None:
    requests = {GPU: 2, "amd.com/gpu": 4, "nvidia.com/mig-1g.10gb": 1, RDMA: 1, CPU: 8000}
    assert gpu_units(requests) == 7
