"""The Kubeflow column of bench/operator_scale.py: its PyTorchJobs are the dtjob bench's
gangs (same pod count, cpu, image, on the fake nodes) and its ratios divide like figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytorchjob = load("pytorchjob")
scale_ratios = load("scale_ratios")


def test_a_gang_of_n_pods_is_one_master_and_n_minus_one_workers() -> None:
    job = pytorchjob.pytorchjob("big-0", 64)
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert {kind: s["replicas"] for kind, s in specs.items()} == {"Master": 1, "Worker": 63}
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert job["metadata"]["name"] == "big-0"
    assert job["spec"]["runPolicy"]["suspend"] is False


def test_suspend_sets_run_policy_suspend() -> None:
    job = pytorchjob.pytorchjob("m-0", 8, suspend=True)
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert sum(s["replicas"] for s in job["spec"]["pytorchReplicaSpecs"].values()) == 8


def test_every_pod_is_tiny_and_lands_on_the_fake_nodes() -> None:
    for spec in pytorchjob.pytorchjob("b-0", 8)["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"] == {"type": "kwok"}  # hack/cluster_api.gpu_node's label
        assert "tolerations" not in pod  # the fake nodes are untainted, as for dtjob's pods
        [container] = pod["containers"]
        assert container["name"] == "pytorch"  # the container training-operator fills in
        assert container["resources"] == {"requests": {"cpu": "10m"}, "limits": {"cpu": "10m"}}


def test_replica_templates_are_not_shared() -> None:
    specs = pytorchjob.pytorchjob("b-0", 8)["spec"]["pytorchReplicaSpecs"]
    specs["Master"]["template"]["spec"]["nodeSelector"]["x"] = "y"
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {"type": "kwok"}


def test_a_gang_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="pods=1"):
        pytorchjob.pytorchjob("one", 1)


def test_suspended_reads_the_suspended_condition() -> None:
    cond = {"type": "Suspended", "status": "True"}
    assert pytorchjob.is_suspended({"status": {"conditions": [cond]}})
    assert not pytorchjob.is_suspended({"status": {"conditions": [{**cond, "status": "False"}]}})
    assert not pytorchjob.is_suspended({"metadata": {"name": "new"}})


def test_ratios_divide_dtjob_by_kubeflow_figure_by_figure() -> None:
    dtjob = {
        "time_to_64_pods": {"p50_s": 1.0},
        "burst": {
            "all_pods_running_s": 30.0,
            "operator_cpu_s_per_1000_pods": 7.0,
            "operator_cpu_s_per_1000_pods_to_idle": 9.0,
        },
        "memory": {"rss_idle_mib": 120.0, "rss_with_jobs_mib": 140.0},
    }
    kubeflow = {
        "time_to_64_pods": {"p50_s": 4.0},
        "burst": {
            "all_pods_running_s": 160.0,
            "operator_cpu_s_per_1000_pods": 14.0,
            "operator_cpu_s_per_1000_pods_to_idle": 30.0,
        },
        "memory": {"rss_idle_mib": 40.0, "rss_with_jobs_mib": 0},
    }
    assert scale_ratios.ratios(dtjob, kubeflow) == {
        "burst_all_pods_running": 0.188,
        "burst_cpu_s_per_1000_pods": 0.5,
        "burst_cpu_s_per_1000_pods_to_idle": 0.3,
        "time_to_64_pods_p50": 0.25,
        "memory_idle": 3.0,
        "memory_with_jobs": None,  # nothing to divide by
    }


def test_a_part_either_operator_skipped_has_no_ratio() -> None:
    out = scale_ratios.ratios({"memory": {"rss_idle_mib": 1.0}}, {"burst": {}})
    assert set(out) == set(scale_ratios.RATIOS)
    assert all(value is None for value in out.values())
