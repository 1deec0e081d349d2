"""Kubeflow PyTorchJob manifests for the side-by-side operator benchmark: the same gang as
bench/operator_scale.py's dtjob jobs, in Kubeflow training-operator's API (pure).

A gang of `pods` is 1 Master + (pods - 1) Workers, the shape training-operator gives a
torchrun job; every container asks for what the dtjob bench's roles ask for (cpu 10m,
requests = limits, as dtjob's pod builder sets them) and names the same image, which the
fake (KWOK) nodes never pull.

Placement: dtjob's bench jobs carry no nodeSelector or toleration, and the fake nodes have
no taint (hack/cluster_api.gpu_node), so neither is needed to land there. The selector on
`type: kwok`, the label every fake node carries, only makes that explicit: a real node
(DTJOB_NODE=real) is tainted and labelled otherwise, so neither operator's pods reach it.
"""

from __future__ import annotations

from typing import Any

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"
# training-operator's label on every pod of a job (pkg/apis/kubeflow.org/v1 JobNameLabel).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
# Its required container name (PyTorchJobDefaultContainerName): the one it adds env to.
CONTAINER = "pytorch"
IMAGE = "dtjob/trainer:0.1.0"  # what the dtjob bench's pods name (settings.trainer_image)
KWOK_NODE_SELECTOR = {"type": "kwok"}


def pod_template(cpu: str) -> dict[str, Any]:
    """One replica type's pod template: a single `pytorch` container on a fake node."""
    amounts = {"cpu": cpu}
    return {
        "spec": {
            "nodeSelector": dict(KWOK_NODE_SELECTOR),
            "containers": [
                {
                    "name": CONTAINER,
                    "image": IMAGE,
                    "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                }
            ],
        }
    }


def pytorchjob(name: str, pods: int, *, suspend: bool = False, cpu: str = "10m") -> dict[str, Any]:
    """A PyTorchJob of `pods` pods (1 Master + pods - 1 Workers); `suspend` sets
    runPolicy.suspend, under which training-operator creates no pods (and deletes any)."""
    if pods < 2:
        raise ValueError(f"a PyTorchJob gang here is 1 Master + Workers: pods={pods} < 2")
    replicas = {"Master": 1, "Worker": pods - 1}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"suspend": suspend},
            "pytorchReplicaSpecs": {
                kind: {"replicas": n, "template": pod_template(cpu)} for kind, n in replicas.items()
            },
        },
    }


def is_suspended(job: dict[str, Any]) -> bool:
    """training-operator has seen the job suspended: its Suspended condition is True."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions)
