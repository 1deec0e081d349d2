"""The operator's hot writes (child creates, pod deletes, status patches, Events) sent as
plain JSON over the same ApiClient, past the generated API methods.

Why: kubernetes 37's generated methods check their arguments with pydantic: a dict body
becomes a model (model_validate) and then a dict again (model_dump) before it is sent.
In a burst of gang creations that was most of a create's CPU besides TLS, for objects
the pure builders already made in the API's own JSON. Everything else a call goes
through stays: ApiClient.param_serialize (headers, auth, host) and call_api, so the rate
limit, the leader guard, the timeouts and the request metrics of GuardedApiClient apply.

Every answer is read to its end (`.data`) before it is dropped: an unread response keeps
its connection out of the pool, and the next call pays a TLS handshake."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"

# (API group/version path, plural) of each kind the operator creates.
KIND_PATHS: dict[str, tuple[str, str]] = {
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Event": ("/api/v1", "events"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
}


def collection_path(prefix: str, namespace: str, plural: str) -> str:
    """The URL path of a namespaced collection."""
    return f"{prefix}/namespaces/{quote(namespace, safe='')}/{plural}"


def object_path(prefix: str, namespace: str, plural: str, name: str) -> str:
    """The URL path of one namespaced object."""
    return f"{collection_path(prefix, namespace, plural)}/{quote(name, safe='')}"


def send(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    query: list[tuple[str, Any]] | None = None,
    content_type: str = JSON,
) -> bytes:
    """One request; the answer's body (read whole). A non-2xx answer raises ApiException,
    as the generated methods do (its .status, .reason and .body)."""
    headers = {"Accept": JSON, "Content-Type": content_type}
    method, url, headers, body, post = api.param_serialize(
        method=method, resource_path=path, query_params=query or None,
        header_params=headers, body=body, auth_settings=["BearerToken"],
    )  # fmt: skip
    resp = api.call_api(method, url, headers, body, post)
    data = resp.read()  # type: ignore[no-untyped-call]
    if not 200 <= resp.status <= 299:
        raise ApiException.from_response(http_resp=resp, body=None, data=None)
    return bytes(data or b"")
