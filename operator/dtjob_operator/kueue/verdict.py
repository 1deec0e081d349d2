"""What Kueue decided about a job, read from its Workload (pure; docs/design/kueue-contract.md
sections 2 and 3): admitted or not and why, evicted and why, and where each podSet goes.

The placement of an admitted podSet is what Kueue's own job integrations merge into their
pods before they start them: the assigned ResourceFlavors' nodeLabels (a key the pods
already select on keeps the pods' value) and tolerations, the admission checks'
podSetUpdates (additive: a key with another value is a conflict, which fails the job as
Kueue's integrations do), and Kueue's labels and annotation on every pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtjob_api.status import KUEUE_ADMITTED_MESSAGE
from dtjob_operator.admission.placement import Placement, merged
from dtjob_operator.constants import KUEUE_GROUP

POD_SET_LABEL = f"{KUEUE_GROUP}/podset"
WORKLOAD_ANNOTATION = f"{KUEUE_GROUP}/workload"
LOCAL_QUEUE_LABEL = f"{KUEUE_GROUP}/local-queue-name"
CLUSTER_QUEUE_LABEL = f"{KUEUE_GROUP}/cluster-queue-name"
# Topology Aware Scheduling: pods of a podSet Kueue placed by topology are created gated;
# Kueue's ungater adds each pod's domain to its nodeSelector (by its index label) and lifts
# the gate. It only looks at pods that carry one of these annotations, as jobframework
# writes them: the podSet's request, or "unconstrained" for a ClusterQueue of topology
# flavors only.
TOPOLOGY_GATE = f"{KUEUE_GROUP}/topology"
TOPOLOGY_ANNOTATIONS = {
    "required": f"{KUEUE_GROUP}/podset-required-topology",
    "preferred": f"{KUEUE_GROUP}/podset-preferred-topology",
}
UNCONSTRAINED_ANNOTATION = f"{KUEUE_GROUP}/podset-unconstrained-topology"


@dataclass(frozen=True)
class Verdict:
    """Kueue's word on the job."""

    admitted: bool
    cluster_queue: str | None
    waiting: str | None
    """Why it is not admitted: the QuotaReserved (or Admitted) condition's message."""
    evicted: tuple[str, str] | None
    """(reason, message) of Evicted=True: the gang must stop."""
    finished: bool


def condition(workload: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def _true(workload: Mapping[str, Any], type_: str) -> bool:
    return (condition(workload, type_) or {}).get("status") == "True"


def verdict(workload: Mapping[str, Any]) -> Verdict:
    """Kueue's word on the job whose Workload this is."""
    admission = (workload.get("status") or {}).get("admission") or {}
    evicted = condition(workload, "Evicted") if _true(workload, "Evicted") else None
    waiting = None
    if not _true(workload, "Admitted"):
        for type_ in ("QuotaReserved", "Admitted"):
            found = condition(workload, type_)
            if found and found.get("message"):
                waiting = str(found["message"])
                break
        else:
            waiting = "waiting for Kueue to consider the Workload"
    return Verdict(
        admitted=_true(workload, "Admitted") and evicted is None,
        cluster_queue=admission.get("clusterQueue"),
        waiting=waiting,
        evicted=(str(evicted.get("reason", "")), str(evicted.get("message", "")))
        if evicted
        else None,
        finished=_true(workload, "Finished"),
    )


def flavors_of(workload: Mapping[str, Any]) -> set[str]:
    """The ResourceFlavors the admission assigned (their specs are read to place pods)."""
    assignments = ((workload.get("status") or {}).get("admission") or {}).get(
        "podSetAssignments"
    ) or []
    return {f for a in assignments for f in (a.get("flavors") or {}).values()}


def admitted_counts(workload: Mapping[str, Any]) -> dict[str, int]:
    """podSet -> the pods Kueue admitted: fewer than the podSet's count where it admitted
    partially (a podSet with minCount), else its count (also where an assignment from an
    older Kueue has none)."""
    asked = _asked(workload)
    admission = (workload.get("status") or {}).get("admission") or {}
    out = {}
    for assignment in admission.get("podSetAssignments") or []:
        name = str(assignment.get("name"))
        count = assignment.get("count")
        out[name] = int(count) if isinstance(count, int) else asked.get(name, 0)
    return out


def _asked(workload: Mapping[str, Any]) -> dict[str, int]:
    return {str(p.get("name")): int(p.get("count") or 0)
            for p in (workload.get("spec") or {}).get("podSets") or []}  # fmt: skip


def admitted_message(workload: Mapping[str, Any]) -> str:
    """What the job's Admitted condition says Kueue decided: the ClusterQueue, and each
    podSet's flavors (a user never has to read the Workload to know where the gang goes)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    parts = []
    for assignment in admission.get("podSetAssignments") or []:
        flavors = dict.fromkeys((assignment.get("flavors") or {}).values())
        if flavors:
            parts.append(f"{assignment.get('name')}={'+'.join(flavors)}")
    said = f"{KUEUE_ADMITTED_MESSAGE} in ClusterQueue {admission.get('clusterQueue') or '?'}"
    said += f", flavors {', '.join(parts)}" if parts else ""
    asked = _asked(workload)
    for pod_set, count in admitted_counts(workload).items():
        if count < asked.get(pod_set, count):
            said += f"; {pod_set} partially admitted: {count} of {asked[pod_set]} pods"
    for pod_set, domains in topology_domains(workload).items():
        placed = ", ".join(f"{d} x{n}" for d, n in domains)
        said += f"; {pod_set} placed by topology on {placed}"
    return said


def placements(
    workload: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]
) -> dict[str, Placement]:
    """Per podSet, what the admission adds to its pods; `flavors` maps each assigned
    ResourceFlavor's name to its spec. Raises PlacementConflict as described above."""
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    name = workload["metadata"]["name"]
    queue = (workload.get("spec") or {}).get("queueName")
    out = {}
    for assignment in admission.get("podSetAssignments") or []:
        selector: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        for flavor in dict.fromkeys((assignment.get("flavors") or {}).values()):
            spec = flavors.get(flavor) or {}
            for key, value in (spec.get("nodeLabels") or {}).items():
                selector.setdefault(key, value)
            tolerations += [t for t in spec.get("tolerations") or [] if t not in tolerations]
        labels = {POD_SET_LABEL: assignment["name"]}
        if queue:
            labels[LOCAL_QUEUE_LABEL] = str(queue)
        if admission.get("clusterQueue"):
            labels[CLUSTER_QUEUE_LABEL] = str(admission["clusterQueue"])
        annotations = {WORKLOAD_ANNOTATION: name}
        gates: tuple[str, ...] = ()
        if assignment.get("topologyAssignment"):
            annotations |= _topology_annotation(workload, assignment["name"])
            gates = (TOPOLOGY_GATE,)
        placement = Placement(selector, tolerations, labels, annotations, gates)
        for check in status.get("admissionChecks") or []:
            for update in check.get("podSetUpdates") or []:
                if update.get("name") == assignment["name"]:
                    placement = _with_update(placement, update, str(check.get("name")))
        out[assignment["name"]] = placement
    return out


def _topology_annotation(workload: Mapping[str, Any], pod_set: str) -> dict[str, str]:
    for spec in (workload.get("spec") or {}).get("podSets") or []:
        if spec.get("name") == pod_set:
            request = spec.get("topologyRequest") or {}
            for kind, key in TOPOLOGY_ANNOTATIONS.items():
                if request.get(kind):
                    return {key: str(request[kind])}
    return {UNCONSTRAINED_ANNOTATION: "true"}


def indexed(placement: Placement, label: str, index: int) -> Placement:
    """The placement of the pod at `index` in its podSet: under topology, the index label
    Kueue's ungater orders the pods by."""
    if not placement.scheduling_gates:
        return placement
    labels = {**placement.labels, label: str(index)}
    return Placement(placement.node_selector, placement.tolerations, labels,
                     placement.annotations, placement.scheduling_gates)  # fmt: skip


def topology_domains(workload: Mapping[str, Any]) -> dict[str, list[tuple[str, int]]]:
    """podSet -> [(domain, pods)] in rank order, from the admission's topologyAssignment
    (Kueue's compressed form: slices of domains, each level's values either universal or
    prefix + root + suffix, pod counts universal or per domain). A domain is its lowest
    level's value (a host name where the Topology ends at kubernetes.io/hostname)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    out: dict[str, list[tuple[str, int]]] = {}
    for assignment in admission.get("podSetAssignments") or []:
        topology = assignment.get("topologyAssignment")
        if not topology:
            continue
        domains = out.setdefault(str(assignment.get("name")), [])
        for piece in topology.get("slices") or []:
            counts = piece.get("podCounts") or {}
            for i in range(int(piece.get("domainCount") or 0)):
                values = [_level_value(v, i) for v in piece.get("valuesPerLevel") or []]
                count = counts.get("universal")
                count = count if count is not None else (counts.get("individual") or [0])[i]
                domains.append((values[-1] if values else "?", int(count)))
    return out


def _level_value(values: Mapping[str, Any], i: int) -> str:
    if values.get("universal") is not None:
        return str(values["universal"])
    each = values.get("individual") or {}
    roots = each.get("roots") or []
    root = roots[i] if i < len(roots) else ""
    return f"{each.get('prefix') or ''}{root}{each.get('suffix') or ''}"


def _with_update(placement: Placement, update: Mapping[str, Any], check: str) -> Placement:
    where = f"admission check {check}:"
    return Placement(
        merged(placement.node_selector, update.get("nodeSelector") or {}, f"{where} nodeSelector"),
        [*placement.tolerations, *(update.get("tolerations") or [])],
        merged(placement.labels, update.get("labels") or {}, f"{where} label"),
        merged(placement.annotations, update.get("annotations") or {}, f"{where} annotation"),
        placement.scheduling_gates,
    )
