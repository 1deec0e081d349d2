"""Test helpers for the real (local or given) cluster: fluent builders, a polling wait, and
the knobs that drive KWOK's fake pods and nodes (see hack/kwok/*.yaml).

Builders return plain dicts (the API's own JSON), so what a test sends is what it reads.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

T = TypeVar("T")

GPU = "nvidia.com/gpu"
# Annotations read by the KWOK stages in hack/kwok/ (the fake kubelet's knobs).
EXIT_CODE = "dtjob.io/kwok-exit-code"  # "0" -> Succeeded, other -> Failed with that code
EXIT_AFTER = "dtjob.io/kwok-exit-after"  # Go duration before the exit, e.g. "5s"
EXIT_REASON = "dtjob.io/kwok-reason"  # container terminated reason (default Completed/Error)
NODE_READY = "dtjob.io/kwok-node-ready"  # "false" holds a fake node NotReady
KWOK_NODE = "kwok.x-k8s.io/node"


def wait_for(
    check: Callable[[], T],
    timeout: float = 30,
    interval: float = 0.2,
    what: str = "condition",
    explain: Callable[[], str] | None = None,
) -> T:
    """Call check() until it returns something truthy and return that.

    Raises TimeoutError naming `what`, the last value seen and, given `explain`, the state it
    describes at that moment, so a failing test says what it was waiting for and what it
    saw instead of just timing out (CI keeps only the log's tail).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            seen = f"; {explain()}" if explain is not None else ""
            raise TimeoutError(
                f"gave up after {timeout:.0f} s waiting for {what}; last: {last!r}{seen}"
            )
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


class PodBuilder:
    """`PodBuilder("w-0").gpus(2).annotate(EXIT_CODE, "137").build()`."""

    def __init__(self, name: str, image: str = "registry.local/trainer:test") -> None:
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {}, "annotations": {}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": image, "resources": {}}],
            },
        }

    def gpus(self, n: int) -> PodBuilder:
        # Extended resources must have request == limit; setting only the limit implies both.
        self._container["resources"].setdefault("limits", {})[GPU] = str(n)
        return self

    def requests(self, **resources: str) -> PodBuilder:
        self._container["resources"].setdefault("requests", {}).update(resources)
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"]["labels"][key] = value
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"]["annotations"][key] = value
        return self

    def exits(self, code: int, after: str | None = None) -> PodBuilder:
        """Run, then exit with `code` (after a Go duration, if given) on its own."""
        self.annotate(EXIT_CODE, str(code))
        return self.annotate(EXIT_AFTER, after) if after else self

    def owned_by(self, owner: Any) -> PodBuilder:
        """Owner reference to any API object (model or dict) with kind/apiVersion/name/uid."""
        o = owner if isinstance(owner, dict) else _as_dict(owner)
        ref = {
            "apiVersion": o["apiVersion"],
            "kind": o["kind"],
            "name": o["metadata"]["name"],
            "uid": o["metadata"]["uid"],
            "blockOwnerDeletion": True,
            "controller": True,
        }
        self._pod["metadata"].setdefault("ownerReferences", []).append(ref)
        return self

    def node_selector(self, **labels: str) -> PodBuilder:
        self._pod["spec"].setdefault("nodeSelector", {}).update(labels)
        return self

    def tolerate(self, key: str) -> PodBuilder:
        self._pod["spec"].setdefault("tolerations", []).append({"key": key, "operator": "Exists"})
        return self

    def build(self) -> dict[str, Any]:
        return self._pod

    @property
    def _container(self) -> dict[str, Any]:
        return self._pod["spec"]["containers"][0]


def _as_dict(obj: Any) -> dict[str, Any]:
    return client.ApiClient().sanitize_for_serialization(obj)  # type: ignore[no-any-return]


# Every namespace create_namespace made, in order: tests/integration/conftest.py deletes those
# a test made when it ends, failed or not, so a failure leaves no pods holding the fake GPUs
# that the next test waits for (one failure used to take six more tests down with it).
MADE_NAMESPACES: list[tuple[client.CoreV1Api, str]] = []


def create_namespace(core: client.CoreV1Api, prefix: str = "t", timeout: float = 60) -> str:
    """A fresh namespace, returned once its default ServiceAccount exists (the
    ServiceAccount admission plugin refuses pods until the controller-manager made it)."""
    name = unique(prefix)
    core.create_namespace({"metadata": {"name": name, "labels": {"dtjob.io/test": "true"}}})
    MADE_NAMESPACES.append((core, name))
    wait_for(
        lambda: _exists(lambda: core.read_namespaced_service_account("default", name)),
        timeout,
        what=f"ServiceAccount default in {name}",
    )
    return name


def delete_namespace_now(core: client.CoreV1Api, name: str) -> None:
    """Delete the namespace and its pods at once (grace 0): a pod held Terminating (KWOK's
    slow delete, a checkpointing trainer) would keep its GPUs for minutes otherwise. Gone
    or going already (404, 409) is fine. The namespace first, as the namespace controller
    does: its jobs' pods then go in a namespace the operator sees terminating, and their
    gangs are not restarted (pods first, each test's end was a burst of restarts)."""
    try:
        core.delete_namespace(name)
    except ApiException as e:
        if e.status not in (404, 409):
            raise
    with contextlib.suppress(ApiException):
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)


def _exists(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def apply_quota(
    core: client.CoreV1Api,
    ns: str,
    name: str,
    resource: str,
    amount: int,
    hard: dict[str, str] | None = None,
) -> None:
    """Create or update the ResourceQuota `name` so that `requests.<resource>` is `amount`
    (plus any other `hard` entries), and wait until the quota controller has computed it:
    admission reads status.hard, which lags the spec."""
    key = f"requests.{resource}"
    body = {"metadata": {"name": name}, "spec": {"hard": {key: str(amount), **(hard or {})}}}
    if _exists(lambda: core.read_namespaced_resource_quota(name, ns)):
        core.patch_namespaced_resource_quota(name, ns, body)
    else:
        core.create_namespaced_resource_quota(ns, body)
    wait_for(
        lambda: (
            (core.read_namespaced_resource_quota(name, ns).status.hard or {}).get(key)
            == str(amount)
        ),
        what=f"quota {name} of {amount} {resource} in {ns} computed",
    )


def pod_phase(core: client.CoreV1Api, ns: str, name: str) -> str | None:
    return core.read_namespaced_pod(name, ns).status.phase


def wait_pod_phase(
    core: client.CoreV1Api, ns: str, name: str, phase: str, timeout: float = 30
) -> client.V1Pod:
    def check() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase == phase else None

    return wait_for(check, timeout, what=f"pod {ns}/{name} phase {phase}")


def drive_pod_exit(
    core: client.CoreV1Api, ns: str, name: str, code: int, reason: str | None = None
) -> client.V1Pod:
    """Make a Running fake pod's containers exit with `code`; wait for the terminal phase."""
    annotations = {EXIT_CODE: str(code)}
    if reason:
        annotations[EXIT_REASON] = reason
    core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": annotations}})
    return wait_pod_phase(core, ns, name, "Succeeded" if code == 0 else "Failed")


def post_exit_status(core: client.CoreV1Api, ns: str, name: str, code: int) -> None:
    """Write the status a kubelet posts when a pod's containers exit with `code`: for a test
    whose subject is what the operator does next, when the fake kubelet (KWOK) has not acted
    on the exit annotation in time (seen on a loaded machine: it stays Running for minutes)."""
    pod = core.read_namespaced_pod(name, ns)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                  "startedAt": now, "finishedAt": now}  # fmt: skip
    statuses = [
        {"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0,
         "started": False, "state": {"terminated": terminated}}
        for c in pod.spec.containers
    ]  # fmt: skip
    phase = "Succeeded" if code == 0 else "Failed"
    core.patch_namespaced_pod_status(
        name, ns, {"status": {"phase": phase, "containerStatuses": statuses}}
    )


def exit_codes(pod: client.V1Pod) -> dict[str, int]:
    """Container name -> exit code, from the pod's status (terminated containers only)."""
    return {
        s.name: s.state.terminated.exit_code
        for s in pod.status.container_statuses or []
        if s.state and s.state.terminated
    }


def events_for(core: client.CoreV1Api, ns: str, name: str, reason: str) -> list[client.CoreV1Event]:
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [e for e in events if e.reason == reason]


def fake_gpu_node(
    name: str, gpus: int = 8, labels: dict[str, str] | None = None, taint: str | None = None
) -> dict[str, Any]:
    """An extra KWOK node for a test that changes node state; a taint keeps other pods off."""
    res = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE: "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})},
        },
        "spec": {"taints": [{"key": taint, "effect": "NoSchedule"}]} if taint else {},
        "status": {"capacity": res, "allocatable": res},
    }
    return node


def node_ready(core: client.CoreV1Api, name: str) -> bool | None:
    """True/False from the node's Ready condition; None while it has none."""
    for c in core.read_node(name).status.conditions or []:
        if c.type == "Ready":
            return c.status == "True"
    return None


def set_node_ready(core: client.CoreV1Api, name: str, ready: bool) -> None:
    """Make a fake node's kubelet report Ready (or NotReady) and wait until it does."""
    value = None if ready else "false"  # null in a merge patch removes the annotation
    core.patch_node(name, {"metadata": {"annotations": {NODE_READY: value}}})
    wait_for(lambda: node_ready(core, name) is ready, what=f"node {name} Ready={ready}")


def pod_deletions(kubeconfig: Path, namespace: str, prefix: str) -> list[str] | None:
    """Who deleted (or evicted) pods named `prefix`* in `namespace`, from the local
    cluster's audit log (hack/audit-policy.yaml); None for a cluster without one."""
    audit = kubeconfig.parent / "logs" / "audit.log"
    if not audit.exists():
        return None
    found = []
    for line in audit.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            ref = record.get("objectRef") or {}
            if ref.get("namespace") == namespace and ref.get("name", "").startswith(prefix):
                user = record.get("user", {}).get("username")
                found.append(
                    f"{record.get('stageTimestamp')} {record.get('verb')} {ref.get('name')} "
                    f"by {user} ({record.get('userAgent')}): "
                    f"{record.get('responseStatus', {}).get('code')}"
                )
    return found


def kill_kubelet(api: client.ApiClient, node: str) -> None:
    """Play a dead kubelet on a fake node: take over its Lease in kube-node-lease, so KWOK
    stops heartbeating the node and confirming its pods' deletions. The node lifecycle
    controller marks it Ready=Unknown ~40-50 s later; its deleted pods stay Terminating
    until they are force-deleted or the Node is deleted."""
    # A holder whose lease is still valid for an hour: KWOK does not take an unexpired lease
    # back, and the node lifecycle controller sees its renewTime stand still.
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    leases = client.CoordinationV1Api(api)
    leases.patch_namespaced_lease(
        node,
        "kube-node-lease",
        {
            "spec": {
                "holderIdentity": "dead-kubelet",
                "renewTime": now,
                "leaseDurationSeconds": 3600,
            }
        },
    )


def bound_claim(core: client.CoreV1Api, ns: str, name: str, mode: str, volumes: list[str]) -> None:
    """A claim bound statically to a hostPath volume made for it."""
    pv = unique("ckpt-pv")
    core.create_persistent_volume(
        {
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": [mode],
                "storageClassName": "",
                "hostPath": {"path": f"/tmp/{pv}"},
                "claimRef": {"namespace": ns, "name": name},
            },
        }
    )
    volumes.append(pv)
    claim(core, ns, name, mode, volume=pv)
    wait_for(
        lambda: core.read_namespaced_persistent_volume_claim(name, ns).status.phase == "Bound",
        60,
        what=f"claim {ns}/{name} bound",
    )


def claim(core: client.CoreV1Api, ns: str, name: str, mode: str, volume: str = "") -> None:
    spec: dict[str, Any] = {
        "accessModes": [mode],
        "storageClassName": "",
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if volume:
        spec["volumeName"] = volume
    core.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": name}, "spec": spec})


def gpu_pods(core: client.CoreV1Api) -> list[str]:
    """The unfinished pods of every namespace that request GPUs: a test on the 4 fake GPU
    nodes waits until earlier tests have left none."""
    unfinished = "status.phase!=Succeeded,status.phase!=Failed"
    pods = core.list_pod_for_all_namespaces(field_selector=unfinished).items
    return [
        p.metadata.name for p in pods
        if any(GPU in ((c.resources and c.resources.requests) or {}) for c in p.spec.containers)
    ]  # fmt: skip
