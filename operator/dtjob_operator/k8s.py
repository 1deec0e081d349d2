"""The operator's only door to the Kubernetes API (sync client, used from worker threads),
over api_client.GuardedApiClient.

Objects go in and come out as plain JSON dicts (camelCase), the same shape the pure
builders produce and the planner reads, so nothing above this module sees client models.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dtjob_api import GROUP, KIND, PLURAL, VERSION
from dtjob_operator import rest
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.policies.suspect_taint import TAINT_KEY, taint_patch

log = logging.getLogger(__name__)
Obj = dict[str, Any]


# Every (API group, resource, verb) this module calls, and nothing else ("" is the core
# group). The chart grants exactly these plus kopf's (handlers.KOPF_CALLS) and what the
# per-job Role passes on (tests/unit/operator/test_chart.py compares the rendered chart
# with them; docs/operator.md lists them). A new call needs its row here.
API_CALLS: frozenset[tuple[str, str, str]] = frozenset(
    {
        (GROUP, PLURAL, "get"),
        (GROUP, PLURAL, "list"),
        (GROUP, PLURAL, "delete"),  # ttlSecondsAfterFinished
        (GROUP, f"{PLURAL}/status", "patch"),
        ("", "pods", "list"),  # a job's, and (admission) every pod on the nodes
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "configmaps", "list"),
        ("", "configmaps", "create"),
        ("", "services", "create"),
        ("", "serviceaccounts", "create"),
        # A create that finds the name taken reads the object: is it this job's (ownership)?
        ("", "pods", "get"),
        ("", "configmaps", "get"),
        ("", "services", "get"),
        ("", "serviceaccounts", "get"),
        ("rbac.authorization.k8s.io", "roles", "get"),
        ("rbac.authorization.k8s.io", "rolebindings", "get"),
        ("networking.k8s.io", "networkpolicies", "get"),
        ("", "persistentvolumeclaims", "get"),  # spec.checkpoint.claimName (CheckpointStorage)
        # A stalled gang's stacks (stall_stacks.py): its pods' log tails, kept in a ConfigMap.
        ("", "pods/log", "get"),
        ("", "configmaps", "patch"),
        ("", "events", "create"),
        # The Events of a pod that hangs in ContainerCreating: FailedMount, FailedAttachVolume.
        ("", "events", "list"),
        ("", "resourcequotas", "list"),
        ("", "nodes", "list"),
        ("", "nodes", "get"),  # a terminating pod's node, fresh while its gang runs
        ("scheduling.k8s.io", "priorityclasses", "list"),
        ("networking.k8s.io", "networkpolicies", "create"),  # settings.network_policy
        ("rbac.authorization.k8s.io", "roles", "create"),
        ("rbac.authorization.k8s.io", "rolebindings", "create"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        # Jobs in a Kueue LocalQueue (kueue/backend.py).
        ("kueue.x-k8s.io", "workloads", "get"),
        ("kueue.x-k8s.io", "workloads", "create"),
        ("kueue.x-k8s.io", "workloads", "patch"),  # spec.active; finalizers let go
        ("kueue.x-k8s.io", "workloads", "delete"),  # a job whose queue label was removed
        ("kueue.x-k8s.io", "workloads", "list"),  # is Kueue there; a deleted job's
        ("kueue.x-k8s.io", "workloads/status", "patch"),
        ("kueue.x-k8s.io", "resourceflavors", "get"),
        ("kueue.x-k8s.io", "workloadpriorityclasses", "get"),
        # Does a job's LocalQueue lead to MultiKueue (kueue/multikueue.py)?
        ("kueue.x-k8s.io", "localqueues", "get"),
        ("kueue.x-k8s.io", "clusterqueues", "get"),
        ("kueue.x-k8s.io", "admissionchecks", "get"),
    }
)


# The kinds create() makes: a job's children (every kind rest.py sends but Events).
CHILD_KINDS = frozenset(rest.KIND_PATHS) - {"Event"}


# Granted only with the chart's taintSuspectNodes (settings.taint_suspect_nodes).
TAINT_CALLS: frozenset[tuple[str, str, str]] = frozenset({("", "nodes", "patch")})


def _page(resp: object) -> tuple[list[Obj], str | None]:
    """Items and continue token of a list call made with _preload_content=False."""
    body = json.loads(cast(Any, resp).data)
    items: list[Obj] = body.get("items") or []
    return items, (body.get("metadata") or {}).get("continue") or None


def read_or_none(call: Callable[..., object], *args: Any) -> Obj | None:
    """One object from a read call, as raw JSON, or None when it does not exist (404)."""
    try:
        resp = call(*args, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    obj: Obj = json.loads(cast(Any, resp).data)
    return obj


def list_pages(call: Callable[..., object], page_size: int, **kwargs: Any) -> list[Obj]:
    """Every item of a list call, fetched `page_size` at a time (limit + continue), raw JSON.

    A continue token the API server no longer knows (410 Expired: compacted away during a
    long list) restarts the list in one piece, as client-go's pager does: the pages already
    read may be from an older revision than the rest, so they are dropped."""
    items: list[Obj] = []
    token: str | None = None
    while True:
        try:
            resp = call(**kwargs, limit=page_size, _continue=token, _preload_content=False)
        except ApiException as exc:
            if exc.status != 410 or token is None:
                raise
            log.info("list continue token expired after %d items; listing again", len(items))
            return _page(call(**kwargs, _preload_content=False))[0]
        page, token = _page(resp)
        items.extend(page)
        if not token:
            return items


class KubeApi:
    """Thin typed wrapper over the calls the reconciler makes. Every list is paginated
    (`page_size` items a page)."""

    def __init__(self, api_client: client.ApiClient, page_size: int = 500) -> None:
        self.page_size = page_size
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)

    # -- reads --------------------------------------------------------------------------

    def get_job(self, namespace: str, name: str) -> Obj | None:
        """The job as stored, or None when it is gone."""
        try:
            job = cast(
                Obj,
                self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return job

    def list_pods(self, namespace: str, job_name: str) -> list[Obj]:
        """Pods labelled as belonging to the job, as raw JSON."""
        return list_pages(
            self.core.list_namespaced_pod, self.page_size,
            namespace=namespace, label_selector=f"{LABEL_JOB_NAME}={job_name}",
        )  # fmt: skip

    def get_pvc(self, namespace: str, name: str) -> Obj | None:
        """A PersistentVolumeClaim as raw JSON, or None when it does not exist."""
        return read_or_none(self.core.read_namespaced_persistent_volume_claim, name, namespace)

    def list_pod_events(self, namespace: str, pod_name: str, pod_uid: str | None) -> list[Obj]:
        """core/v1 Events about one pod, as raw JSON: this incarnation of the name only when
        its uid is given (a restarted gang reuses the names, and events outlive pods)."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod_name}"
        if pod_uid:
            selector += f",involvedObject.uid={pod_uid}"
        return list_pages(
            self.core.list_namespaced_event, self.page_size,
            namespace=namespace, field_selector=selector,
        )  # fmt: skip

    # -- what the admission reads (cluster-wide lists, raw JSON) -------------------------

    def list_jobs(self, namespaces: list[str] | None = None) -> list[Obj]:
        """Every DistributedTrainingJob, or those of `namespaces`."""
        kind = {"group": GROUP, "version": VERSION, "plural": PLURAL}
        if not namespaces:
            return list_pages(self.custom.list_cluster_custom_object, self.page_size, **kind)
        jobs: list[Obj] = []
        for ns in namespaces:
            jobs += list_pages(
                self.custom.list_namespaced_custom_object, self.page_size, namespace=ns, **kind
            )
        return jobs

    def list_all_pods(self) -> list[Obj]:
        """Every pod not yet finished, cluster-wide (what holds node and quota room)."""
        return list_pages(
            self.core.list_pod_for_all_namespaces, self.page_size,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )  # fmt: skip

    def list_nodes(self) -> list[Obj]:
        """Every node."""
        return list_pages(self.core.list_node, self.page_size)

    def get_node(self, name: str) -> Obj | None:
        """A node as raw JSON, or None when it does not exist."""
        return read_or_none(self.core.read_node, name)

    def list_resource_quotas(self) -> list[Obj]:
        """Every ResourceQuota, cluster-wide."""
        return list_pages(self.core.list_resource_quota_for_all_namespaces, self.page_size)

    def list_priority_classes(self) -> list[Obj]:
        """Every PriorityClass."""
        return list_pages(self.scheduling.list_priority_class, self.page_size)

    # -- leader election ----------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The Lease as raw JSON, or None."""
        return read_or_none(self.coordination.read_namespaced_lease, name, namespace)

    def create_lease(self, namespace: str, body: Obj) -> bool:
        """Create the Lease; False when another replica created it first."""
        try:
            self.coordination.create_namespaced_lease(namespace, cast(Any, body))
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def replace_lease(self, namespace: str, body: Obj) -> bool:
        """Replace the Lease at its resourceVersion; False when someone else wrote it first."""
        try:
            self.coordination.replace_namespaced_lease(
                body["metadata"]["name"], namespace, cast(Any, body)
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def list_config_maps(self, namespace: str, job_name: str) -> list[Obj]:
        """ConfigMaps labelled as belonging to the job, as raw JSON."""
        return list_pages(
            self.core.list_namespaced_config_map, self.page_size,
            namespace=namespace, label_selector=f"{LABEL_JOB_NAME}={job_name}",
        )  # fmt: skip

    # -- writes -------------------------------------------------------------------------

    def create(self, obj: Obj) -> bool:
        """Create a child; False when it already exists (creation is idempotent). The body
        goes as the builders made it, and the answer is read and dropped (rest.py): the
        watch brings the object."""
        ns = obj["metadata"]["namespace"]
        kind = obj["kind"]
        if kind not in CHILD_KINDS:
            raise ValueError(f"cannot create a {kind}: not a child kind of a job")
        prefix, plural = rest.KIND_PATHS[kind]
        try:
            rest.send(self.api_client, "POST", rest.collection_path(prefix, ns, plural), obj)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def read_child(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A child-kind object as raw JSON, or None when it is gone."""
        readers: dict[str, Callable[..., object]] = {
            "Pod": self.core.read_namespaced_pod,
            "Service": self.core.read_namespaced_service,
            "ConfigMap": self.core.read_namespaced_config_map,
            "ServiceAccount": self.core.read_namespaced_service_account,
            "Role": self.rbac.read_namespaced_role,
            "RoleBinding": self.rbac.read_namespaced_role_binding,
            "NetworkPolicy": self.networking.read_namespaced_network_policy,
        }
        return read_or_none(readers[kind], name, namespace)

    def pod_log_tail(self, namespace: str, name: str, container: str, lines: int) -> str | None:
        """The last `lines` lines of a container's log; None when they cannot be read (the
        pod gone, its container never started, no right to pods/log)."""
        try:
            text = self.core.read_namespaced_pod_log(
                name, namespace, container=container, tail_lines=lines, _request_timeout=20
            )
        except ApiException:
            return None
        return str(text)

    def put_config_map(self, obj: Obj) -> None:
        """Create a ConfigMap, or replace the data of the one already there."""
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            create: Callable[..., object] = self.core.create_namespaced_config_map
            create(ns, obj)  # a dict body is sent as it is
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_namespaced_config_map(name, ns, {"data": obj["data"]})

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete a pod; already gone is fine."""
        query = [("gracePeriodSeconds", grace_seconds)] if grace_seconds is not None else None
        try:
            path = rest.object_path("/api/v1", namespace, "pods", name)
            rest.send(self.api_client, "DELETE", path, query=query)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete the job; its children follow through owner references (background GC)."""
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def patch_status(self, namespace: str, name: str, status: Obj) -> str | None:
        """Merge-patch the status subresource with `status` (None values delete keys);
        returns the job's resourceVersion after the write."""
        path = rest.object_path(f"/apis/{GROUP}/{VERSION}", namespace, PLURAL, name) + "/status"
        data = rest.send(self.api_client, "PATCH", path, {"status": status},
                         content_type=rest.MERGE_PATCH)  # fmt: skip
        meta = json.loads(data).get("metadata") if data else None
        return str(meta["resourceVersion"]) if meta and meta.get("resourceVersion") else None

    def emit_event(self, job: Obj, event_type: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the job; failures are logged, never raised."""
        meta = job["metadata"]
        # The log tells the same story as the events (recorded once per transition, so few):
        # an operator's log must say why it created or deleted what it did.
        log.info("%s/%s: %s %s: %s", meta["namespace"], meta["name"], event_type, reason, message)
        now = datetime.now(UTC)
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "dtjob-operator"},
            "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "count": 1,
        }
        try:
            path = rest.collection_path("/api/v1", meta["namespace"], "events")
            rest.send(self.api_client, "POST", path, body)  # read and dropped, as in create()
        except ApiException as exc:
            log.warning("could not record event %s on %s: %s", reason, meta["name"], exc.reason)

    def emit_node_event(self, node: Obj, event_type: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on a Node (`kubectl describe node` lists it). The API
        server keeps a cluster-scoped object's Events in `default`: the operator needs
        events create there (a cluster-wide install has it). Failures are logged, never
        raised."""
        meta = node["metadata"]
        log.info("node %s: %s %s: %s", meta["name"], event_type, reason, message)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                               "uid": meta.get("uid", "")},
            "type": event_type, "reason": reason, "message": message[:1024],
            "source": {"component": "dtjob-operator"},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }  # fmt: skip
        try:
            self.core.create_namespaced_event("default", cast(Any, body))
        except ApiException as exc:
            log.warning("could not record event %s on node %s: %s", reason, meta["name"],
                        exc.reason)  # fmt: skip

    def taint_suspect_node(self, name: str, jobs: Sequence[str], why: str) -> None:
        """Taint the node `dtjob.io/suspect` (policies/suspect_taint.py) from a fresh read,
        retried when its taints changed in between (409). Failures are logged, never
        raised: the jobs keep off the node whatever becomes of the taint."""
        for _ in range(3):
            try:
                node = read_or_none(self.core.read_node, name)
                patch = taint_patch(node, jobs, why, datetime.now(UTC)) if node else None
                if patch is None:
                    return
                # A merge patch: the taints list is replaced whole, by what was read plus ours.
                self.core.patch_node(name, patch, _content_type="application/merge-patch+json")
                log.warning("node %s tainted %s: %s", name, TAINT_KEY, why)
                return
            except ApiException as exc:
                if exc.status != 409:
                    log.warning("could not taint node %s: %s", name, exc.reason)
                    return
        log.warning("could not taint node %s: its taints kept changing", name)


def versions(objects: Iterable[Mapping[str, Any]]) -> set[tuple[Any, Any]]:
    """(uid, resourceVersion) of each object: two lists with the same set show the same
    incarnations, each as far along."""
    return {((o.get("metadata") or {}).get("uid"),
             (o.get("metadata") or {}).get("resourceVersion")) for o in objects}  # fmt: skip
