"""The operator's only door to the Kubernetes API (sync client, used from worker threads),
over api_client.GuardedApiClient.

Objects go in and come out as plain JSON dicts (camelCase), the same shape the pure
builders produce and the planner reads, so nothing above this module sees client models.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dtjob_api import GROUP, KIND, PLURAL, VERSION
from dtjob_operator import rest
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.kubehttp import ApiException, HttpClient
from dtjob_operator.policies.suspect_taint import TAINT_KEY, taint_patch
from dtjob_operator.rest import CORE, collection_path, get_or_none, list_pages, object_path

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


# The kinds create() makes: a job's children (every kind of rest.KIND_PATHS but Events).
CHILD_KINDS = frozenset(rest.KIND_PATHS) - {"Event"}


# Granted only with the chart's taintSuspectNodes (settings.taint_suspect_nodes).
TAINT_CALLS: frozenset[tuple[str, str, str]] = frozenset({("", "nodes", "patch")})


JOBS = rest.group_path(GROUP, VERSION)
COORDINATION = "/apis/coordination.k8s.io/v1"
SCHEDULING = "/apis/scheduling.k8s.io/v1"


class KubeApi:
    """Thin typed wrapper over the calls the reconciler makes. Every list is paginated
    (`page_size` items a page)."""

    def __init__(self, api_client: HttpClient, page_size: int = 500) -> None:
        self.page_size = page_size
        self.api_client = api_client

    def list_all(self, path: str, query: rest.Query | None = None) -> list[Obj]:
        """Every item of the collection at `path`, page by page."""
        return list_pages(self.api_client, path, self.page_size, query)

    # -- reads --------------------------------------------------------------------------

    def get_job(self, namespace: str, name: str) -> Obj | None:
        """The job as stored, or None when it is gone."""
        return get_or_none(self.api_client, object_path(JOBS, namespace, PLURAL, name))

    def list_pods(self, namespace: str, job_name: str) -> list[Obj]:
        """Pods labelled as belonging to the job, as raw JSON."""
        return self.list_all(collection_path(CORE, namespace, "pods"),
                             [("labelSelector", f"{LABEL_JOB_NAME}={job_name}")])  # fmt: skip

    def get_pvc(self, namespace: str, name: str) -> Obj | None:
        """A PersistentVolumeClaim as raw JSON, or None when it does not exist."""
        return get_or_none(
            self.api_client, object_path(CORE, namespace, "persistentvolumeclaims", name)
        )

    def list_pod_events(self, namespace: str, pod_name: str, pod_uid: str | None) -> list[Obj]:
        """core/v1 Events about one pod, as raw JSON: this incarnation of the name only when
        its uid is given (a restarted gang reuses the names, and events outlive pods)."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod_name}"
        if pod_uid:
            selector += f",involvedObject.uid={pod_uid}"
        return self.list_all(collection_path(CORE, namespace, "events"),
                             [("fieldSelector", selector)])  # fmt: skip

    # -- what the admission reads (cluster-wide lists, raw JSON) -------------------------

    def list_jobs(self, namespaces: list[str] | None = None) -> list[Obj]:
        """Every DistributedTrainingJob, or those of `namespaces`."""
        if not namespaces:
            return self.list_all(collection_path(JOBS, None, PLURAL))
        jobs: list[Obj] = []
        for ns in namespaces:
            jobs += self.list_all(collection_path(JOBS, ns, PLURAL))
        return jobs

    def list_all_pods(self) -> list[Obj]:
        """Every pod not yet finished, cluster-wide (what holds node and quota room)."""
        return self.list_all(
            collection_path(CORE, None, "pods"),
            [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")],
        )

    def list_nodes(self) -> list[Obj]:
        """Every node."""
        return self.list_all(collection_path(CORE, None, "nodes"))

    def get_node(self, name: str) -> Obj | None:
        """A node as raw JSON, or None when it does not exist."""
        return get_or_none(self.api_client, object_path(CORE, None, "nodes", name))

    def list_resource_quotas(self) -> list[Obj]:
        """Every ResourceQuota, cluster-wide."""
        return self.list_all(collection_path(CORE, None, "resourcequotas"))

    def list_priority_classes(self) -> list[Obj]:
        """Every PriorityClass."""
        return self.list_all(collection_path(SCHEDULING, None, "priorityclasses"))

    # -- leader election ----------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The Lease as raw JSON, or None."""
        return get_or_none(self.api_client, object_path(COORDINATION, namespace, "leases", name))

    def create_lease(self, namespace: str, body: Obj) -> bool:
        """Create the Lease; False when another replica created it first."""
        try:
            self.api_client.data("POST", collection_path(COORDINATION, namespace, "leases"), body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def replace_lease(self, namespace: str, body: Obj) -> bool:
        """Replace the Lease at its resourceVersion; False when someone else wrote it first."""
        path = object_path(COORDINATION, namespace, "leases", body["metadata"]["name"])
        try:
            self.api_client.data("PUT", path, body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def list_config_maps(self, namespace: str, job_name: str) -> list[Obj]:
        """ConfigMaps labelled as belonging to the job, as raw JSON."""
        return self.list_all(collection_path(CORE, namespace, "configmaps"),
                             [("labelSelector", f"{LABEL_JOB_NAME}={job_name}")])  # fmt: skip

    # -- writes -------------------------------------------------------------------------

    def create(self, obj: Obj) -> str | None:
        """Create a child; its uid, or None when it already exists (creation is
        idempotent). The body goes as the builders made it; of the answer only the uid is
        kept (the watch brings the object; the reconcile checks its cache by the uid)."""
        ns = obj["metadata"]["namespace"]
        kind = obj["kind"]
        if kind not in CHILD_KINDS:
            raise ValueError(f"cannot create a {kind}: not a child kind of a job")
        prefix, plural = rest.KIND_PATHS[kind]
        try:
            answer = self.api_client.json("POST", collection_path(prefix, ns, plural), obj)
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return str(((answer or {}).get("metadata") or {}).get("uid") or "") or None

    def read_child(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A child-kind object as raw JSON, or None when it is gone."""
        prefix, plural = rest.KIND_PATHS[kind]
        return get_or_none(self.api_client, object_path(prefix, namespace, plural, name))

    def pod_log_tail(self, namespace: str, name: str, container: str, lines: int) -> str | None:
        """The last `lines` lines of a container's log; None when they cannot be read (the
        pod gone, its container never started, no right to pods/log)."""
        path = object_path(CORE, namespace, "pods", name) + "/log"
        try:
            data = self.api_client.data(
                "GET", path, timeout=20.0, query=[("container", container), ("tailLines", lines)]
            )
        except ApiException:
            return None
        return data.decode("utf-8", "replace")

    def put_config_map(self, obj: Obj) -> None:
        """Create a ConfigMap, or replace the data of the one already there."""
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            self.api_client.data("POST", collection_path(CORE, ns, "configmaps"), obj)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.api_client.data(
                "PATCH",
                object_path(CORE, ns, "configmaps", name),
                {"data": obj["data"]},
                content_type=rest.MERGE_PATCH,
            )

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete a pod; already gone is fine."""
        query = [("gracePeriodSeconds", grace_seconds)] if grace_seconds is not None else None
        try:
            path = object_path(CORE, namespace, "pods", name)
            self.api_client.data("DELETE", path, query=query)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete the job; its children follow through owner references (background GC)."""
        try:
            self.api_client.data(
                "DELETE",
                object_path(JOBS, namespace, PLURAL, name),
                query=[("propagationPolicy", "Background")],
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def patch_status(self, namespace: str, name: str, status: Obj) -> str | None:
        """Merge-patch the status subresource with `status` (None values delete keys);
        returns the job's resourceVersion after the write."""
        path = object_path(JOBS, namespace, PLURAL, name) + "/status"
        data = self.api_client.data(
            "PATCH", path, {"status": status}, content_type=rest.MERGE_PATCH
        )
        meta = json.loads(data).get("metadata") if data else None
        return str(meta["resourceVersion"]) if meta and meta.get("resourceVersion") else None

    def emit_event(self, job: Obj, event_type: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the job; failures are logged, never raised."""
        meta = job["metadata"]
        # The log tells the same story as the events (recorded once per transition, so few):
        # an operator's log must say why it created or deleted what it did.
        log.info("%s/%s: %s %s: %s", meta["namespace"], meta["name"], event_type, reason, message)
        involved = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
                    "namespace": meta["namespace"], "uid": meta["uid"]}  # fmt: skip
        self._event(meta["namespace"], meta["name"], involved, event_type, reason, message)

    def emit_node_event(self, node: Obj, event_type: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on a Node (`kubectl describe node` lists it). The API
        server keeps a cluster-scoped object's Events in `default`: the operator needs
        events create there (a cluster-wide install has it). Failures are logged, never
        raised."""
        meta = node["metadata"]
        log.info("node %s: %s %s: %s", meta["name"], event_type, reason, message)
        involved = {"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                    "uid": meta.get("uid", "")}  # fmt: skip
        self._event("default", meta["name"], involved, event_type, reason, message)

    def _event(self, namespace: str, name: str, involved: Obj, event_type: str, reason: str,
               message: str) -> None:  # fmt: skip
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": involved,
            "type": event_type, "reason": reason, "message": message[:1024],
            "source": {"component": "dtjob-operator"},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }  # fmt: skip
        try:
            # The answer is read and dropped, as in create().
            self.api_client.data("POST", collection_path(CORE, namespace, "events"), body)
        except ApiException as exc:
            log.warning("could not record event %s on %s %s: %s", reason, involved["kind"],
                        name, exc.reason)  # fmt: skip

    def taint_suspect_node(self, name: str, jobs: Sequence[str], why: str) -> None:
        """Taint the node `dtjob.io/suspect` (policies/suspect_taint.py) from a fresh read,
        retried when its taints changed in between (409). Failures are logged, never
        raised: the jobs keep off the node whatever becomes of the taint."""
        for _ in range(3):
            try:
                node = self.get_node(name)
                patch = taint_patch(node, jobs, why, datetime.now(UTC)) if node else None
                if patch is None:
                    return
                # A merge patch: the taints list is replaced whole, by what was read plus ours.
                self.api_client.data(
                    "PATCH",
                    object_path(CORE, None, "nodes", name),
                    patch,
                    content_type=rest.MERGE_PATCH,
                )
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
