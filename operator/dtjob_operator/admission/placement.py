"""Where an admitted gang's pods go (pure): what an admission backend adds to a pod before it
is created. The built-in admission pins each pod to the node a pass placed it on; Kueue's
adapter adds its flavors' node labels and tolerations, its labels and annotation, its
admission checks' podSetUpdates and, under topology, a scheduling gate. The planner merges
the placement into the pod it builds (plan_state._missing_pods) without knowing who made it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class PlacementConflict(ValueError):
    """An admission check asks for a label, annotation or node selector the pods already
    set to another value: the gang can never start as admitted."""


@dataclass(frozen=True)
class Placement:
    """What an admission adds to a pod: Kueue's to every pod of a podSet, the built-in
    admission's to one pod (its node)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    scheduling_gates: tuple[str, ...] = ()
    node_name: str | None = None
    """The built-in admission's topology placement: the pod may run on this node only."""


def merged(ours: dict[str, str], theirs: Mapping[str, str], what: str) -> dict[str, str]:
    """`ours` with `theirs` added; a key both set to different values is a conflict."""
    for key, value in theirs.items():
        if ours.get(key, value) != value:
            raise PlacementConflict(f"{what} {key}={value} conflicts with {key}={ours[key]}")
    return {**ours, **theirs}


def pinned(affinity: Mapping[str, Any] | None, node: str) -> dict[str, Any]:
    """The pod's affinity with `node` required: a matchFields term on metadata.name ANDed
    into every required term the template has (terms are ORed), or the only term."""
    out = dict(affinity or {})
    node_affinity = dict(out.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or []), pin]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    out["nodeAffinity"] = node_affinity
    return out


def avoiding(affinity: Mapping[str, Any] | None, nodes: Sequence[str]) -> dict[str, Any]:
    """The pod's affinity with a preference, of the greatest weight, for any node but
    `nodes`: `metadata.name NotIn [node]` fields, one a node (core/v1 takes one value only
    for a field requirement), ANDed in one preferred term beside the template's own. A
    preference, not a requirement: where no other node has room, the pod still runs, and
    a job on a small pool is never stranded by a node it once suspected."""
    out = dict(affinity or {})
    node_affinity = dict(out.get("nodeAffinity") or {})
    keep_off = [
        {"key": "metadata.name", "operator": "NotIn", "values": [node]} for node in sorted(nodes)
    ]
    preferred = list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    preferred.append({"weight": 100, "preference": {"matchFields": keep_off}})
    node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    out["nodeAffinity"] = node_affinity
    return out


def keep_off(pod: dict[str, Any], nodes: Sequence[str]) -> dict[str, Any]:
    """The pod steered off `nodes` (the job's avoided nodes and the suspects of the
    cluster, policies/node_blame.py). Not a pod that Kueue places by topology (scheduling-
    gated): Kueue chose its host from a Workload made before the avoidance."""
    spec = pod.get("spec") or {}
    if not nodes or spec.get("schedulingGates"):
        return pod
    return {**pod, "spec": {**spec, "affinity": avoiding(spec.get("affinity"), nodes)}}


def kept_off(spec: Mapping[str, Any]) -> frozenset[str]:
    """The nodes a pod's preferred affinity steers it off by name (`avoiding`'s)."""
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return frozenset(
        str(v)
        for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        for f in (term.get("preference") or {}).get("matchFields") or []
        if f.get("key") == "metadata.name" and f.get("operator") == "NotIn"
        for v in f.get("values") or []
    )


def place(pod: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """The pod manifest with the placement merged in; the pod's own node selector keys
    keep their values for flavor labels, and a conflicting admission-check value raises."""
    meta, spec = dict(pod["metadata"]), dict(pod["spec"])
    own = dict(spec.get("nodeSelector") or {})
    flavor = {k: v for k, v in placement.node_selector.items() if k not in own}
    spec["nodeSelector"] = {**own, **flavor}
    spec["tolerations"] = [*(spec.get("tolerations") or []), *placement.tolerations]
    meta["labels"] = merged(dict(meta.get("labels") or {}), placement.labels, "label")
    meta["annotations"] = merged(
        dict(meta.get("annotations") or {}), placement.annotations, "annotation"
    )
    if placement.scheduling_gates:
        # Gates exist only at creation: the ungater lifts them once it has placed the pod.
        own_gates = list(spec.get("schedulingGates") or [])
        spec["schedulingGates"] = own_gates + [
            {"name": g} for g in placement.scheduling_gates if {"name": g} not in own_gates
        ]
    if placement.node_name is not None:
        spec["affinity"] = pinned(spec.get("affinity"), placement.node_name)
    if not spec["nodeSelector"]:
        del spec["nodeSelector"]
    if not spec["tolerations"]:
        del spec["tolerations"]
    return {**pod, "metadata": meta, "spec": spec}
