"""The Workload that stands for a job in Kueue (operator/kueue/workload.py): one podSet per
group of identical pods, with exactly the requests the gang's pods carry, the same across
gang restarts, owned by the job and named as Kueue's own job integrations name theirs."""

from __future__ import annotations

from unit.operator.builders import a_job

from dtjob_api.spec import MAX_STAGE_GROUPS
from dtjob_operator.builders import Job
from dtjob_operator.builders.children import build_pods
from dtjob_operator.builders.job import FULL_SIZE
from dtjob_operator.kueue.workload import (
    FINALIZER,
    JOB_UID_LABEL,
    MAX_POD_SETS,
    Priority,
    build_workload,
    pod_sets,
    workload_name,
)
from dtjob_operator.settings import OperatorSettings

SETTINGS = OperatorSettings()


def test_one_pod_set_per_role_with_the_pods_own_requests() -> None:
    job = (
        a_job().with_strategy("ParameterServer")
        .with_workers(3, gpus=2, extendedResources={"rdma/hca": 1})
        .with_ps(1, cpu="4")
    ).job()  # fmt: skip
    sets = pod_sets(job, SETTINGS)
    assert [(p.name, p.count) for p in sets] == [("worker", 3), ("ps", 1)]
    pods = build_pods(job, 0, SETTINGS)
    trainer = pods[0]["spec"]["containers"][0]
    assert sets[0].template["spec"]["containers"][0]["resources"] == trainer["resources"]
    assert trainer["resources"]["requests"]["rdma/hca"] == "1"
    assert sets[1].template["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "4"


def test_stage_groups_of_different_pods_are_pod_sets_of_their_own() -> None:
    groups = [{"name": "cpu", "replicas": 2, "gpus": 0, "cpu": "8"},
              {"name": "gpu", "replicas": 2, "gpus": 1}]  # fmt: skip
    job = a_job().with_strategy("Pipeline").with_stages(4, groups=groups).job()
    sets = pod_sets(job, SETTINGS)
    assert [(p.name, p.count) for p in sets] == [("stage", 2), ("stage-1", 2)]
    gpu = sets[1].template["spec"]["containers"][0]["resources"]["limits"]
    assert gpu["nvidia.com/gpu"] == "1" and "nvidia.com/gpu" not in str(sets[0].template)


def test_the_workload_is_the_same_for_every_gang_generation() -> None:
    job = a_job().with_workers(2, gpus=1).job()
    # pod_sets() builds generation 0; the template keeps no env, label or name that varies.
    template = pod_sets(job, SETTINGS)[0].template
    assert "env" not in str(template) and "generation" not in str(template)
    pods = [p["metadata"]["name"] for p in build_pods(job, 3, SETTINGS)]
    assert pod_sets(job, SETTINGS)[0].pods == tuple(pods)


def test_the_workload_is_owned_named_and_queued() -> None:
    job = a_job().with_workers(2, gpus=1).job()
    wl = build_workload(job, "team-a", SETTINGS, Priority("WorkloadPriorityClass", "high", 1000))
    meta, spec = wl["metadata"], wl["spec"]
    assert meta["name"] == workload_name(job) and meta["name"].startswith(
        "distributedtrainingjob-j-"
    )
    assert meta["finalizers"] == [FINALIZER] and meta["labels"][JOB_UID_LABEL] == job.uid
    (owner,) = meta["ownerReferences"]
    assert owner["uid"] == job.uid and owner["controller"] is True
    assert spec["queueName"] == "team-a" and spec["priority"] == 1000
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                        "name": "high"}  # fmt: skip
    assert spec["podSets"][0]["count"] == 2


def test_a_recreated_job_of_the_same_name_gets_another_workload() -> None:
    first = a_job().with_workers(1).job()
    second = a_job().with_workers(1).job()
    object.__setattr__(second, "uid", "another-uid")
    assert workload_name(first) != workload_name(second)
    assert len(workload_name(first).rsplit("-", 1)[1]) == 5


def test_no_job_has_more_kinds_of_pods_than_kueue_takes() -> None:
    assert MAX_STAGE_GROUPS <= MAX_POD_SETS
    groups = [{"name": f"g{i}", "replicas": 1, "gpus": i % 2, "cpu": str(i + 1)} for i in range(8)]
    job = a_job().with_strategy("Pipeline").with_stages(8, groups=groups).job()
    assert len(pod_sets(job, SETTINGS)) == MAX_POD_SETS


def test_every_pod_set_names_its_index_label_and_a_topology_request_its_level() -> None:
    plain = build_workload(a_job().with_workers(2, gpus=1).job(), "q", SETTINGS)
    assert plain["spec"]["podSets"][0]["topologyRequest"] == {
        "podIndexLabel": "dtjob.io/pod-set-index"
    }
    rack = {"topology": {"required": "example.com/rack"}}
    packed = a_job().with_workers(4, gpus=1).with_spec(placement=rack).job()
    (worker,) = build_workload(packed, "q", SETTINGS)["spec"]["podSets"]
    assert worker["topologyRequest"] == {
        "podIndexLabel": "dtjob.io/pod-set-index",
        "required": "example.com/rack",
    }


def test_a_parameter_server_and_its_workers_are_packed_as_one_group() -> None:
    block = {"topology": {"preferred": "example.com/block"}}
    job = (
        a_job().with_strategy("ParameterServer").with_workers(3, gpus=1).with_ps(1)
        .with_spec(placement=block)
    ).job()  # fmt: skip
    requests = [p["topologyRequest"] for p in build_workload(job, "q", SETTINGS)["spec"]["podSets"]]
    assert [r["preferred"] for r in requests] == ["example.com/block"] * 2
    assert [r["podSetGroupName"] for r in requests] == ["gang", "gang"]


def test_an_elastic_job_asks_for_its_maximum_with_its_minimum_as_min_count() -> None:
    """Kueue's partial admission picks the size from minCount up; the Workload is the job at
    its maximum even while its status holds the size of an earlier admission."""
    obj = a_job().with_workers(4, gpus=1, minReplicas=2).with_status(elastic={"replicas": 3})
    full = Job.from_object(obj.obj(), size=FULL_SIZE)
    sets = build_workload(full, "team", SETTINGS)["spec"]["podSets"]
    assert [(p["name"], p["count"], p.get("minCount")) for p in sets] == [("worker", 4, 2)]
    fixed = build_workload(a_job().with_workers(4, gpus=1).job(), "team", SETTINGS)
    assert "minCount" not in fixed["spec"]["podSets"][0]
    no_range = a_job().with_workers(4, gpus=1, minReplicas=4).job()
    assert "minCount" not in build_workload(no_range, "team", SETTINGS)["spec"]["podSets"][0]
