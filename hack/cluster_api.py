"""A tiny stdlib client for the local apiserver, and the fake GPU node manifests.

cluster-up must not depend on the Python venv or on kubectl, so it speaks HTTPS with the
admin client certificate directly.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# KWOK manages only nodes carrying this annotation (--manage-nodes-with-annotation-selector),
# so a real node added later is left to its kubelet.
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"


class Api:
    def __init__(self, server: str, pki: Path) -> None:
        self.server = server
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def request(self, method: str, path: str, body: Any = None, timeout: float = 5) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()

    def ready(self) -> bool:
        try:
            return bool(self.request("GET", "/readyz", timeout=2) == "ok")
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def create(self, path: str, obj: dict[str, Any]) -> None:
        """POST, treating AlreadyExists as success (cluster-up is idempotent)."""
        try:
            self.request("POST", path, obj)
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise


def parse_labels(spec: str) -> dict[str, str]:
    """'a=b,c=d' -> {'a': 'b', 'c': 'd'}; raises ValueError naming the bad item."""
    labels: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"node label {item!r} is not key=value")
        labels[key] = value
    return labels


def gpu_node(name: str, gpus: int, labels: dict[str, str], cpu: str, memory: str) -> dict[str, Any]:
    """A fake GPU node. Status is accepted at create time; KWOK keeps it and adds conditions.

    No taint: pods need no toleration to land on these nodes, like a plain GPU pool.
    """
    resources = {"cpu": cpu, "memory": memory, "pods": "110", GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(gpus),
                **labels,
            },
        },
        "spec": {},
        "status": {"capacity": resources, "allocatable": resources},
    }


def node_is_ready(node: dict[str, Any]) -> bool:
    """Ready condition True and the not-ready taint gone (the scheduler can use it)."""
    conditions = node.get("status", {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    taints = node.get("spec", {}).get("taints") or []
    return ready and not any(t["key"].startswith("node.kubernetes.io/") for t in taints)
