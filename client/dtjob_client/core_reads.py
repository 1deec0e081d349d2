"""Reads of core objects (pods, Events, ConfigMaps, ResourceQuotas) as the API's JSON, through
the client's ApiClient.

Why not the generated CoreV1Api: importing it builds its pydantic models, about 1.2 s of CPU
(kubernetes 37), more than the rest of a `kubectl dtj get`; and the pure modules read the
API's JSON anyway, which the typed objects had to be turned back into. Only `logs` still
uses CoreV1Api (its streaming reads)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient

CORE = "/api/v1"


def get_json(api: ApiClient, path: str, query: list[tuple[str, str]] | None = None) -> Any:
    """GET `path` (under the API server's root); a refusal raises ApiException, as the
    generated calls do."""
    param = api.param_serialize(
        method="GET",
        resource_path=path,
        query_params=query or [],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*param)
    response.read()  # type: ignore[no-untyped-call]
    return api.response_deserialize(response, {"200": "object"}).data


def config_map(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_json(api, f"{_ns(namespace)}/configmaps/{quote(name, safe='')}"))


def items(
    api: ApiClient, plural: str, namespace: str | None, label_selector: str | None = None
) -> list[dict[str, Any]]:
    """Every object of a core collection, in `namespace` or in all (None)."""
    path = f"{_ns(namespace)}/{plural}" if namespace is not None else f"{CORE}/{plural}"
    query = [("labelSelector", label_selector)] if label_selector else []
    return list(get_json(api, path, query).get("items") or [])


def _ns(namespace: str) -> str:
    return f"{CORE}/namespaces/{quote(namespace, safe='')}"
