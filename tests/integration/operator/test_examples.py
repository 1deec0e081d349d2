"""Every example manifest becomes the gang the env contract promises: one pod per role index,
ranks in the documented order, the headless Service, and the rank-0 address."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dtjob_api.aliases import resolved_type
from helpers.jobs import create_job, env_of, job_pods, wait_phase
from helpers.kube import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))
ROLE_ORDER = ("worker", "stage", "ps")


def processes(role: dict[str, Any]) -> int:
    if role.get("procsPerPod"):
        return int(role["procsPerPod"])
    return int(role.get("gpus", 0)) or 1


def pod_gpus(role: dict[str, Any], index: int) -> int:
    """GPUs of pod `index`: its stage group's (roles.stage.groups), else the role's."""
    for group in role.get("groups") or []:
        if index < group.get("replicas", 1):
            return int(group.get("gpus", 0))
        index -= group.get("replicas", 1)
    return int(role.get("gpus", 0))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_creates_expected_gang(cluster, namespace, path: Path) -> None:
    job = yaml.safe_load(path.read_text())
    name = job["metadata"]["name"]
    spec = job["spec"]
    roles = {r: spec["roles"][r] for r in ROLE_ORDER if spec["roles"].get(r)}
    expected = [f"{name}-{r}-{i}" for r, role in roles.items() for i in range(role["replicas"])]
    world = sum(processes(role) * role["replicas"] for role in roles.values())

    # Examples may pin a GPU model with a nodeSelector; the fake nodes carry no such label,
    # so the test drops it (placement is the scheduler's business, tested elsewhere).
    # Likewise their data PVCs do not exist here: an emptyDir stands in for each.
    (spec.get("checkpoint") or {}).pop("claimName", None)  # nor a checkpoint claim
    for role in roles.values():
        template = role.get("template") or {}
        template.pop("nodeSelector", None)
        for volume in template.get("volumes") or []:
            if volume.pop("persistentVolumeClaim", None) is not None:
                volume["emptyDir"] = {}

    create_job(cluster.api, namespace, job)
    pods = wait_for(
        lambda: len(p := job_pods(cluster.core, namespace, name)) == len(expected) and p,
        timeout=60,
        what=f"{len(expected)} pods of {path.name}",
    )
    by_name = {p.metadata.name: p for p in pods}
    assert sorted(by_name) == sorted(expected)

    first_role = next(iter(roles))
    rank = 0
    for role_name, role in roles.items():
        for index in range(role["replicas"]):
            pod = by_name[f"{name}-{role_name}-{index}"]
            env = env_of(pod)
            assert env["RANK"] == str(rank), pod.metadata.name
            assert env["WORLD_SIZE"] == str(world)
            assert env["LOCAL_WORLD_SIZE"] == str(processes(role))
            assert env["DTJ_ROLE"] == role_name and env["DTJ_ROLE_INDEX"] == str(index)
            # A tf.distribute alias runs (and the pods are told) its target strategy.
            assert env["DTJ_STRATEGY"] == resolved_type(spec["strategy"]["type"])
            assert env["MASTER_ADDR"] == f"{name}-{first_role}-0.{name}.{namespace}.svc"
            assert pod.metadata.labels["dtjob.io/job-name"] == name
            assert pod.metadata.labels["dtjob.io/role"] == role_name
            gpus = pod_gpus(role, index)
            limits = pod.spec.containers[0].resources.limits or {}
            assert limits.get("nvidia.com/gpu") == (str(gpus) if gpus else None)
            if spec.get("trainer", {}).get("command"):
                assert pod.spec.containers[0].command == spec["trainer"]["command"]
            rank += processes(role)
    assert cluster.core.read_namespaced_service(name, namespace).spec.cluster_ip == "None"
    # Fake GPU nodes have room for every example: the whole gang runs.
    running = wait_phase(cluster.api, namespace, name, "Running", timeout=60)
    # The operator writes what runs (the STRATEGY column), an alias resolved.
    assert running["strategy"] == resolved_type(spec["strategy"]["type"])
    # Give the GPUs back before the next example (some take whole nodes).
    client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object(
        "dtjob.io", "v1alpha1", namespace, "distributedtrainingjobs", name
    )
    wait_for(
        lambda: (
            not cluster.core.list_namespaced_pod(
                namespace, label_selector=f"dtjob.io/job-name={name}"
            ).items
        ),
        timeout=60,
        what="the example's pods deleted",
    )
