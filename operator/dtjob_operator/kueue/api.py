"""Kueue's API as the Kueue backend uses it (backend.py): its Workloads, ResourceFlavors,
WorkloadPriorityClasses, and the queues and AdmissionChecks that say whether a job's queue
leads to MultiKueue (multikueue.py), as raw JSON. Every call goes through the operator's
guarded client (KubeApi.api_client), so the same allow-list, leadership check and retries apply."""

from __future__ import annotations

import json
import logging
from typing import Any

from dtjob_operator import rest
from dtjob_operator.api_client import TRANSPORT_ERRORS
from dtjob_operator.constants import KUEUE_GROUP, KUEUE_VERSION, LABEL_JOB_NAME
from dtjob_operator.kubehttp import APPLY_PATCH, MERGE_PATCH, ApiException, HttpClient
from dtjob_operator.rest import collection_path, get_or_none, object_path

log = logging.getLogger(__name__)
Obj = dict[str, Any]
KUEUE = rest.group_path(KUEUE_GROUP, KUEUE_VERSION)


def _names_the_object(exc: ApiException) -> bool:
    """A 404 about the object (its Status names it), not about the resource type (the API
    server's "could not find the requested resource" names none)."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return False
    return bool(((body or {}).get("details") or {}).get("name"))


class KueueNotServed(Exception):
    """Kueue's Workload API answered 404 (not installed) or 403 (not granted)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class KueueApi:
    """The Kueue calls, over the operator's HTTP client."""

    def __init__(self, http: HttpClient) -> None:
        self.http = http

    def get_workload(self, namespace: str, name: str) -> Obj | None:
        """A kueue.x-k8s.io Workload as raw JSON, or None when it does not exist. Raises
        KueueNotServed where the API itself is missing (Kueue not installed, or
        uninstalled) or forbidden to the operator."""
        try:
            obj: Obj = self.http.json("GET", object_path(KUEUE, namespace, "workloads", name))
        except ApiException as exc:
            if exc.status == 404 and _names_the_object(exc):
                return None
            if exc.status in (403, 404):
                raise KueueNotServed(exc.status) from exc
            raise
        return obj

    def serves_workloads(self, namespace: str | None) -> bool:
        """Whether Kueue's Workload API is installed and readable now: one list of at most
        one item, in `namespace` or cluster-wide. Any failure (not installed, no grant, an
        outage) is a no: the caller asks again later."""
        try:
            self.http.data("GET", collection_path(KUEUE, namespace, "workloads"),
                           query=[("limit", 1)])  # fmt: skip
        except ApiException as exc:
            if exc.status not in (403, 404):
                log.info("Kueue's Workload API not readable now (%s); asking again later",
                         exc.status)  # fmt: skip
            return False
        except TRANSPORT_ERRORS as exc:
            log.info("Kueue's Workload API not reachable now (%s); asking again later", exc)
            return False
        return True

    def list_job_workloads(self, namespace: str, job_name: str) -> list[Obj]:
        """The Workloads labelled with a job's name; none where Kueue is not installed."""
        try:
            body = self.http.json(
                "GET",
                collection_path(KUEUE, namespace, "workloads"),
                query=[("labelSelector", f"{LABEL_JOB_NAME}={job_name}")],
            )
        except ApiException as exc:
            if exc.status in (403, 404):  # no Kueue here, or no grant to read its Workloads
                return []
            raise
        items: list[Obj] = (body or {}).get("items") or []
        return items

    def set_workload_finalizers(self, workload: Obj, finalizers: list[str]) -> None:
        """Replace a Workload's finalizers, if it is still at the resourceVersion read."""
        meta = workload["metadata"]
        patch = {"metadata": {"finalizers": finalizers,
                              "resourceVersion": meta["resourceVersion"]}}  # fmt: skip
        try:
            self.http.data("PATCH", object_path(KUEUE, meta["namespace"], "workloads",
                                                meta["name"]),
                           body=patch, content_type=MERGE_PATCH)  # fmt: skip
        except ApiException as exc:
            # 404: gone already. 409: changed since it was read (the watch wakes the job
            # again with the new version, and the next look lets go of it).
            if exc.status not in (404, 409):
                raise

    def get_resource_flavor(self, name: str) -> Obj | None:
        """A Kueue ResourceFlavor as raw JSON, or None when it does not exist."""
        return get_or_none(self.http, object_path(KUEUE, None, "resourceflavors", name))

    def get_workload_priority_class(self, name: str) -> Obj | None:
        """A Kueue WorkloadPriorityClass as raw JSON, or None when it does not exist."""
        return get_or_none(self.http, object_path(KUEUE, None, "workloadpriorityclasses", name))

    def get_local_queue(self, namespace: str, name: str) -> Obj | None:
        """A Kueue LocalQueue as raw JSON, or None when it does not exist."""
        return get_or_none(self.http, object_path(KUEUE, namespace, "localqueues", name))

    def get_cluster_queue(self, name: str) -> Obj | None:
        """A Kueue ClusterQueue as raw JSON, or None when it does not exist."""
        return get_or_none(self.http, object_path(KUEUE, None, "clusterqueues", name))

    def get_admission_check(self, name: str) -> Obj | None:
        """A Kueue AdmissionCheck as raw JSON, or None when it does not exist."""
        return get_or_none(self.http, object_path(KUEUE, None, "admissionchecks", name))

    def create_workload(self, body: Obj) -> bool:
        """Create a Workload; False when it already exists."""
        ns = body["metadata"]["namespace"]
        try:
            self.http.data("POST", collection_path(KUEUE, ns, "workloads"), body=body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def patch_workload(self, namespace: str, name: str, patch: Obj) -> None:
        """Merge-patch a Workload (its spec.active)."""
        self.http.data("PATCH", object_path(KUEUE, namespace, "workloads", name), body=patch,
                       content_type=MERGE_PATCH)  # fmt: skip

    def apply_workload_status(self, body: Obj, manager: str) -> None:
        """Server-side apply of a Workload's status under `manager`: conditions are a map by
        type there, so applying one condition leaves Kueue's own untouched."""
        meta = body["metadata"]
        path = object_path(KUEUE, meta["namespace"], "workloads", meta["name"]) + "/status"
        # JSON is YAML: the apply patch goes as the builders made it.
        self.http.data("PATCH", path, body=body, content_type=APPLY_PATCH,
                       query=[("fieldManager", manager), ("force", True)])  # fmt: skip

    def delete_workload(self, namespace: str, name: str) -> None:
        """Delete a Workload (gone already is fine)."""
        try:
            self.http.data("DELETE", object_path(KUEUE, namespace, "workloads", name))
        except ApiException as exc:
            if exc.status != 404:
                raise
