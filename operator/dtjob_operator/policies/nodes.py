"""Which nodes are lost: no kubelet there will confirm a pod's end.

A node is lost when its Ready condition is False or Unknown (the node lifecycle controller
sets Unknown ~40-50 s after the kubelet stops heartbeating), when it carries the
`node.kubernetes.io/out-of-service` taint (an admin's word that it is down, the same taint
Kubernetes' own pod GC honours), or when its Node object is gone. Pods terminating there
stay Terminating forever unless someone force-deletes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


def is_lost(node: Mapping[str, Any]) -> bool:
    """Not Ready (False or Unknown, or no Ready condition yet) or out of service."""
    taints = (node.get("spec") or {}).get("taints") or []
    if any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints):
        return True
    conditions = (node.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def lost_nodes(wanted: Iterable[str], nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Those of the `wanted` node names that are lost, or have no Node object."""
    by_name = {str(n["metadata"]["name"]): n for n in nodes}
    return frozenset(name for name in wanted if name not in by_name or is_lost(by_name[name]))
