"""The API's URL paths, and the read helpers over kubehttp.HttpClient (one object or
None, a whole paginated list)."""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

from dtjob_operator.kubehttp import JSON, MERGE_PATCH, ApiException, HttpClient, Query

__all__ = ["JSON", "MERGE_PATCH", "Query", "get_or_none", "list_pages"]
log = logging.getLogger(__name__)

CORE = "/api/v1"

# (API group/version path, plural) of each kind the operator creates.
KIND_PATHS: dict[str, tuple[str, str]] = {
    "Pod": (CORE, "pods"),
    "Service": (CORE, "services"),
    "ConfigMap": (CORE, "configmaps"),
    "ServiceAccount": (CORE, "serviceaccounts"),
    "Event": (CORE, "events"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
}


def group_path(group: str, version: str) -> str:
    """`/api/v1` for the core group, else `/apis/<group>/<version>`."""
    return CORE if not group else f"/apis/{group}/{version}"


def collection_path(prefix: str, namespace: str | None, plural: str) -> str:
    """The URL path of a collection: namespaced, or across namespaces (or cluster-scoped)
    when `namespace` is None."""
    if namespace is None:
        return f"{prefix}/{plural}"
    return f"{prefix}/namespaces/{quote(namespace, safe='')}/{plural}"


def object_path(prefix: str, namespace: str | None, plural: str, name: str) -> str:
    """The URL path of one object (cluster-scoped when `namespace` is None)."""
    return f"{collection_path(prefix, namespace, plural)}/{quote(name, safe='')}"


def get_or_none(api: HttpClient, path: str) -> dict[str, Any] | None:
    """One object as raw JSON, or None when it does not exist (404)."""
    try:
        obj: dict[str, Any] = api.json("GET", path)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj


def list_pages(
    api: HttpClient, path: str, page_size: int, query: Query | None = None
) -> list[dict[str, Any]]:
    """Every item of a list, fetched `page_size` at a time (limit + continue), raw JSON.

    A continue token the API server no longer knows (410 Expired: compacted away during a
    long list) restarts the list in one piece, as client-go's pager does: the pages already
    read may be from an older revision than the rest, so they are dropped."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        paged = [*(query or ()), ("limit", page_size), ("continue", token)]
        try:
            body = json.loads(api.data("GET", path, query=paged))
        except ApiException as exc:
            if exc.status != 410 or token is None:
                raise
            log.info("list continue token expired after %d items; listing again", len(items))
            return list(json.loads(api.data("GET", path, query=query)).get("items") or [])
        items.extend(body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue") or None
        if not token:
            return items
