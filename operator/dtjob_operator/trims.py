"""What the caches keep of each object (caches.py): the fields the operator reads, so that
thousands of pods, nodes and jobs fit in little memory (bench/api_load.py measures it)."""

from __future__ import annotations

from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.informer import drop_managed_fields
from dtjob_operator.k8s import Obj
from dtjob_operator.naming import history_config_map_name


def trim_pod_for_capacity(pod: Obj) -> Obj:
    """A pod as the admission reads it: who it is, where it runs, what it requests."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    keep_meta = ("name", "namespace", "uid", "labels", "ownerReferences", "resourceVersion",
                 "deletionTimestamp")  # fmt: skip
    containers = [{"resources": c.get("resources") or {}} for c in spec.get("containers") or []]
    inits = [
        {"resources": c.get("resources") or {}, "restartPolicy": c.get("restartPolicy")}
        for c in spec.get("initContainers") or []
    ]
    return {
        "metadata": {k: meta[k] for k in keep_meta if k in meta},
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": containers,
            "initContainers": inits,
        },
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def trim_node(node: Obj) -> Obj:
    """A node without what the operator never reads; its image list alone is often most of
    it (every image on the node, with sizes)."""
    drop_managed_fields(node)
    status = node.get("status")
    if isinstance(status, dict):
        for key in ("images", "volumesAttached", "volumesInUse", "nodeInfo", "daemonEndpoints"):
            status.pop(key, None)
    meta = node.get("metadata")
    if isinstance(meta, dict):
        meta.pop("annotations", None)
    return node


# What the reconcile reads of its own pods' spec (the node, and what the admission charges a
# pod); the rest (env, volumes, probes, the image...) is what the operator wrote itself and
# never reads back, and most of a pod's size: 8,000 untrimmed pods held 437 MiB.
_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")
_STATUS_DROPPED = ("image", "imageID", "containerID", "allocatedResources", "volumeMounts")


def trim_job_pod(pod: Obj) -> Obj:
    """A pod of a job as the reconcile and the admission read it: all its metadata, its
    status (without the containers' image ids), and of its spec the node and the containers'
    names and resources."""
    trim_owned(pod)
    spec = pod.get("spec")
    if isinstance(spec, dict):
        pod["spec"] = {
            "nodeName": spec.get("nodeName"),
            **{
                kind: [{k: c[k] for k in _CONTAINER_FIELDS if k in c} for c in spec[kind]]
                for kind in ("containers", "initContainers")
                if isinstance(spec.get(kind), list)
            },
        }
    status = pod.get("status")
    if isinstance(status, dict):
        for kind in ("containerStatuses", "initContainerStatuses"):
            for c in status.get(kind) or ():
                for key in _STATUS_DROPPED:
                    c.pop(key, None)
    return pod


def trim_owned(obj: Obj) -> Obj:
    """Our own pods and ConfigMaps: all but managedFields and the last-applied copy."""
    drop_managed_fields(obj)
    annotations = (obj.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj


def trim_to_metadata(obj: Obj) -> Obj:
    """An object watched for its changes and its owner (Kueue's Workloads): its metadata
    without managed fields and annotations, nothing of its spec or status."""
    meta = obj.get("metadata") or {}
    kept = ("name", "namespace", "uid", "resourceVersion", "labels", "finalizers",
            "ownerReferences", "deletionTimestamp")  # fmt: skip
    return {"metadata": {k: meta[k] for k in kept if k in meta}}


def trim_namespace(namespace: Obj) -> Obj:
    """A namespace as the reconcile reads it: is it being deleted."""
    meta = namespace.get("metadata") or {}
    kept = ("name", "uid", "resourceVersion", "deletionTimestamp")
    return {
        "metadata": {k: meta[k] for k in kept if k in meta},
        "status": {"phase": (namespace.get("status") or {}).get("phase")},
    }


def is_history_config_map(obj: Obj) -> bool:
    """A job's loss-history ConfigMap (named after the job its label names)."""
    meta = obj.get("metadata") or {}
    job = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
    return isinstance(job, str) and meta.get("name") == history_config_map_name(job)


def trim_job_config_map(config_map: Obj) -> Obj:
    """Our ConfigMaps as the reconcile reads them: whole, but for the loss history, of
    which only the metadata is kept (the planner must see that it exists; its data, up to
    512 rows that only readers outside the operator want, would make 1,000 jobs cost
    1,000 curves of memory)."""
    trim_owned(config_map)
    if is_history_config_map(config_map):
        config_map.pop("data", None)
        config_map.pop("binaryData", None)
    return config_map
