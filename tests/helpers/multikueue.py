"""Kueue's MultiKueue for the tests (docs/multikueue.md, set up as written there): worker
clusters of their own (hack/cluster.py with a state directory and ports apart from the
lane's cluster, one fake 8-GPU node each), each with its own real Kueue and its own dtjob
operator; and on the manager (the lane's cluster) the kubeconfig Secrets, the
MultiKueueClusters, a MultiKueueConfig, the MultiKueue AdmissionCheck and a ClusterQueue
that runs it.
"""

from __future__ import annotations

import base64
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from helpers.cluster import cluster_cmd
from helpers.kube import wait_for
from helpers.kueue import GROUP, VERSION, Kueue, install_crds
from helpers.operator import OperatorProcess

# The job kind as Kueue's configuration names it (Kind.version.group).
DTJ_FRAMEWORK = "DistributedTrainingJob.v1alpha1.dtjob.io"
KUEUE_NAMESPACE = "kueue-system"
GPUS_PER_WORKER = 8
# The workers' port bases, past the lane's own cluster's (+0..+5): lanes are 100 apart.
PORT_OFFSETS = (40, 50)


@dataclass
class Worker:
    """A worker cluster: its control plane, Kueue and operator."""

    name: str
    env: dict[str, str]
    kubeconfig: Path
    api: client.ApiClient
    kueue: Kueue | None = None
    operator: OperatorProcess | None = None
    cluster_name: str = ""
    """Its MultiKueueCluster on the manager (the Workloads' status.clusterName)."""

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def down(self) -> None:
        for part in (self.operator, self.kueue):
            if part is not None:
                part.stop()
        cluster_cmd("down", self.env)


def start_worker(name: str, index: int, workdir: Path) -> Worker:
    """A worker's control plane with one fake 8-GPU node (no Kueue nor operator yet)."""
    lane_state = Path(os.environ.get("DTJOB_CLUSTER_STATE") or workdir)
    base = int(os.environ.get("DTJOB_CLUSTER_PORT_BASE") or 16440) + PORT_OFFSETS[index]
    env = {**os.environ, "DTJOB_CLUSTER_STATE": f"{lane_state}-{name}",
           "DTJOB_CLUSTER_PORT_BASE": str(base), "DTJOB_NODES": "1",
           "DTJOB_GPUS_PER_NODE": str(GPUS_PER_WORKER),
           "DTJOB_CLUSTER_BY_FIXTURE": "1"}  # fmt: skip
    up = cluster_cmd("up", env)
    assert up.returncode == 0, f"worker cluster {name} did not start: {up.stderr[-2000:]}"
    kubeconfig = Path(cluster_cmd("kubeconfig", env).stdout.strip())
    return Worker(name, env, kubeconfig, config.new_client_from_config(str(kubeconfig)))


def ensure_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        core.create_namespace({"metadata": {"name": name}})
    except client.ApiException as e:
        if e.status != 409:
            raise


def gpu_queue(custom: client.CustomObjectsApi, name: str, gpus: int,
              checks: list[str] | None = None) -> None:  # fmt: skip
    """A ResourceFlavor and a ClusterQueue of `gpus` GPUs named `name`, running `checks`."""
    custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
        "metadata": {"name": f"{name}-gpu"}, "spec": {}})  # fmt: skip
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": f"{name}-gpu",
             "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}],
    }  # fmt: skip
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
        "metadata": {"name": name}, "spec": spec})  # fmt: skip


def local_queue(custom: client.CustomObjectsApi, ns: str, name: str, cluster_queue: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterQueue": cluster_queue}})  # fmt: skip


def disconnect_workers(manager: client.ApiClient, workers: list[Worker], check: str) -> None:
    """Remove what connect_workers made (best effort: a manager cluster may outlive us)."""
    core, custom = client.CoreV1Api(manager), client.CustomObjectsApi(manager)
    calls: list[tuple[Any, tuple[Any, ...]]] = [
        (custom.delete_cluster_custom_object, (GROUP, VERSION, "admissionchecks", check)),
        (custom.delete_cluster_custom_object, (GROUP, VERSION, "multikueueconfigs", check)),
    ]
    for w in workers:
        name = f"{check}-{w.name}"
        calls.append((custom.delete_cluster_custom_object,
                      (GROUP, VERSION, "multikueueclusters", name)))  # fmt: skip
        calls.append((core.delete_namespaced_secret, (name, KUEUE_NAMESPACE)))
    for call, args in calls:
        with contextlib.suppress(client.ApiException):
            call(*args)


def connect_workers(manager: client.ApiClient, workers: list[Worker], check: str) -> None:
    """On the manager: each worker's kubeconfig in a Secret of Kueue's namespace, a
    MultiKueueCluster for it, one MultiKueueConfig listing them, and the AdmissionCheck
    `check` of MultiKueue's controller; waits until Kueue says the check is Active."""
    core, custom = client.CoreV1Api(manager), client.CustomObjectsApi(manager)
    ensure_namespace(core, KUEUE_NAMESPACE)
    for worker in workers:
        # Named after the check: a manager that outlives a run (a rerun, a kept cluster)
        # gets objects of its own each time.
        data = base64.b64encode(worker.kubeconfig.read_bytes()).decode()
        core.create_namespaced_secret(KUEUE_NAMESPACE, {
            "metadata": {"name": f"{check}-{worker.name}"},
            "data": {"kubeconfig": data}})  # fmt: skip
        custom.create_cluster_custom_object(GROUP, VERSION, "multikueueclusters", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "MultiKueueCluster",
            "metadata": {"name": f"{check}-{worker.name}"},
            "spec": {"clusterSource": {"kubeConfig": {
                "locationType": "Secret", "location": f"{check}-{worker.name}"}}}})  # fmt: skip
    custom.create_cluster_custom_object(GROUP, VERSION, "multikueueconfigs", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "MultiKueueConfig",
        "metadata": {"name": check},
        "spec": {"clusters": [f"{check}-{w.name}" for w in workers]}})  # fmt: skip
    custom.create_cluster_custom_object(GROUP, VERSION, "admissionchecks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AdmissionCheck",
        "metadata": {"name": check},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                 "parameters": {"apiGroup": GROUP, "kind": "MultiKueueConfig",
                                "name": check}}})  # fmt: skip

    def active(kind: str, name: str) -> bool:
        obj = custom.get_cluster_custom_object(GROUP, VERSION, kind, name)
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    for worker in workers:
        worker.cluster_name = f"{check}-{worker.name}"
        wait_for(lambda w=worker: active("multikueueclusters", w.cluster_name), 90,  # type: ignore[misc]
                 what=f"MultiKueueCluster {worker.cluster_name} Active")  # fmt: skip
    wait_for(lambda: active("admissionchecks", check), 60, what=f"AdmissionCheck {check} Active")


def worker_stack(worker: Worker, workdir: Path, operator_env: dict[str, str]) -> None:
    """The worker's Kueue (CRDs and process) and its dtjob operator."""
    from helpers.crd import install_crd

    install_crd(worker.api)
    install_crds(worker.kubeconfig, workdir)
    ensure_namespace(worker.core, KUEUE_NAMESPACE)
    worker.kueue = Kueue(worker.kubeconfig, workdir)
    worker.operator = OperatorProcess(worker.kubeconfig, workdir / "operator.log", operator_env)
    worker.operator.start()
