"""Kueue's API as the Kueue backend uses it (backend.py): its Workloads, ResourceFlavors,
WorkloadPriorityClasses, and the queues and AdmissionChecks that say whether a job's queue
leads to MultiKueue (multikueue.py), as raw JSON. Every call goes through the operator's
guarded client (KubeApi.custom), so the same allow-list, leadership check and retries apply."""

from __future__ import annotations

import json
import logging
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dtjob_operator.api_client import TRANSPORT_ERRORS
from dtjob_operator.constants import KUEUE_GROUP, KUEUE_VERSION, LABEL_JOB_NAME
from dtjob_operator.k8s import read_or_none

log = logging.getLogger(__name__)
Obj = dict[str, Any]


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
    """The Kueue calls, over the operator's CustomObjectsApi."""

    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom

    def get_workload(self, namespace: str, name: str) -> Obj | None:
        """A kueue.x-k8s.io Workload as raw JSON, or None when it does not exist. Raises
        KueueNotServed where the API itself is missing (Kueue not installed, or
        uninstalled) or forbidden to the operator."""
        try:
            resp = self.custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404 and _names_the_object(exc):
                return None
            if exc.status in (403, 404):
                raise KueueNotServed(exc.status) from exc
            raise
        obj: Obj = json.loads(cast(Any, resp).data)
        return obj

    def serves_workloads(self, namespace: str | None) -> bool:
        """Whether Kueue's Workload API is installed and readable now: one list of at most
        one item, in `namespace` or cluster-wide. Any failure (not installed, no grant, an
        outage) is a no: the caller asks again later."""
        args = (KUEUE_GROUP, KUEUE_VERSION)
        try:
            if namespace:
                self.custom.list_namespaced_custom_object(*args, namespace, "workloads", limit=1)
            else:
                self.custom.list_cluster_custom_object(*args, "workloads", limit=1)
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
            resp = self.custom.list_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads",
                label_selector=f"{LABEL_JOB_NAME}={job_name}", _preload_content=False,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status in (403, 404):  # no Kueue here, or no grant to read its Workloads
                return []
            raise
        items: list[Obj] = json.loads(cast(Any, resp).data).get("items") or []
        return items

    def set_workload_finalizers(self, workload: Obj, finalizers: list[str]) -> None:
        """Replace a Workload's finalizers, if it is still at the resourceVersion read."""
        meta = workload["metadata"]
        patch = {"metadata": {"finalizers": finalizers,
                              "resourceVersion": meta["resourceVersion"]}}  # fmt: skip
        try:
            self.custom.patch_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, meta["namespace"], "workloads", meta["name"], patch
            )
        except ApiException as exc:
            # 404: gone already. 409: changed since it was read (the watch wakes the job
            # again with the new version, and the next look lets go of it).
            if exc.status not in (404, 409):
                raise

    def get_resource_flavor(self, name: str) -> Obj | None:
        """A Kueue ResourceFlavor as raw JSON, or None when it does not exist."""
        return read_or_none(
            self.custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, "resourceflavors",
            name,
        )  # fmt: skip

    def get_workload_priority_class(self, name: str) -> Obj | None:
        """A Kueue WorkloadPriorityClass as raw JSON, or None when it does not exist."""
        return read_or_none(
            self.custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION,
            "workloadpriorityclasses", name,
        )  # fmt: skip

    def get_local_queue(self, namespace: str, name: str) -> Obj | None:
        """A Kueue LocalQueue as raw JSON, or None when it does not exist."""
        return read_or_none(
            self.custom.get_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION, namespace,
            "localqueues", name,
        )  # fmt: skip

    def get_cluster_queue(self, name: str) -> Obj | None:
        """A Kueue ClusterQueue as raw JSON, or None when it does not exist."""
        return read_or_none(
            self.custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, "clusterqueues",
            name,
        )  # fmt: skip

    def get_admission_check(self, name: str) -> Obj | None:
        """A Kueue AdmissionCheck as raw JSON, or None when it does not exist."""
        return read_or_none(
            self.custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION,
            "admissionchecks", name,
        )  # fmt: skip

    def create_workload(self, body: Obj) -> bool:
        """Create a Workload; False when it already exists."""
        ns = body["metadata"]["namespace"]
        try:
            self.custom.create_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, ns, "workloads", body
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def patch_workload(self, namespace: str, name: str, patch: Obj) -> None:
        """Merge-patch a Workload (its spec.active)."""
        self.custom.patch_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name, patch
        )

    def apply_workload_status(self, body: Obj, manager: str) -> None:
        """Server-side apply of a Workload's status under `manager`: conditions are a map by
        type there, so applying one condition leaves Kueue's own untouched."""
        meta = body["metadata"]
        self.custom.patch_namespaced_custom_object_status(
            KUEUE_GROUP, KUEUE_VERSION, meta["namespace"], "workloads", meta["name"], body,
            field_manager=manager, force=True, _content_type="application/apply-patch+yaml",
        )  # fmt: skip

    def delete_workload(self, namespace: str, name: str) -> None:
        """Delete a Workload (gone already is fine)."""
        try:
            self.custom.delete_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
