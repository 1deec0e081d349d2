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
from dataclasses import dataclass, field
from typing import Any

from dtjob_operator.constants import KUEUE_GROUP

POD_SET_LABEL = f"{KUEUE_GROUP}/podset"
WORKLOAD_ANNOTATION = f"{KUEUE_GROUP}/workload"
LOCAL_QUEUE_LABEL = f"{KUEUE_GROUP}/local-queue-name"
CLUSTER_QUEUE_LABEL = f"{KUEUE_GROUP}/cluster-queue-name"


class PlacementConflict(ValueError):
    """An admission check asks for a label, annotation or node selector the pods already
    set to another value: the gang can never start as admitted."""


@dataclass(frozen=True)
class Placement:
    """What Kueue's admission adds to the pods of one podSet."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


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
        placement = Placement(selector, tolerations, labels, {WORKLOAD_ANNOTATION: name})
        for check in status.get("admissionChecks") or []:
            for update in check.get("podSetUpdates") or []:
                if update.get("name") == assignment["name"]:
                    placement = _with_update(placement, update, str(check.get("name")))
        out[assignment["name"]] = placement
    return out


def _merged(ours: dict[str, str], theirs: Mapping[str, str], what: str) -> dict[str, str]:
    for key, value in theirs.items():
        if ours.get(key, value) != value:
            raise PlacementConflict(f"{what} {key}={value} conflicts with {key}={ours[key]}")
    return {**ours, **theirs}


def _with_update(placement: Placement, update: Mapping[str, Any], check: str) -> Placement:
    where = f"admission check {check}:"
    return Placement(
        _merged(placement.node_selector, update.get("nodeSelector") or {}, f"{where} nodeSelector"),
        [*placement.tolerations, *(update.get("tolerations") or [])],
        _merged(placement.labels, update.get("labels") or {}, f"{where} label"),
        _merged(placement.annotations, update.get("annotations") or {}, f"{where} annotation"),
    )


def place(pod: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """The pod manifest with the placement merged in; the pod's own node selector keys
    keep their values for flavor labels, and a conflicting admission-check value raises."""
    meta, spec = dict(pod["metadata"]), dict(pod["spec"])
    own = dict(spec.get("nodeSelector") or {})
    flavor = {k: v for k, v in placement.node_selector.items() if k not in own}
    spec["nodeSelector"] = {**own, **flavor}
    spec["tolerations"] = [*(spec.get("tolerations") or []), *placement.tolerations]
    meta["labels"] = _merged(dict(meta.get("labels") or {}), placement.labels, "label")
    meta["annotations"] = _merged(
        dict(meta.get("annotations") or {}), placement.annotations, "annotation"
    )
    if not spec["nodeSelector"]:
        del spec["nodeSelector"]
    if not spec["tolerations"]:
        del spec["tolerations"]
    return {**pod, "metadata": meta, "spec": spec}
