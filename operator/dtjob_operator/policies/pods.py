"""Reading pods as the API returns them (plain dicts): identity labels and life state.

Shared by the policies, status and the planner so that "ready", "finished" and "which
gang" mean the same thing everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dtjob_operator.constants import (
    LABEL_GENERATION,
    LABEL_ROLE,
    LABEL_ROLE_INDEX,
    TRAINER_CONTAINER,
)

Pod = Mapping[str, Any]
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def name_of(pod: Pod) -> str:
    """metadata.name."""
    return str(pod["metadata"]["name"])


def _label(pod: Pod, key: str) -> str | None:
    value = (pod.get("metadata", {}).get("labels") or {}).get(key)
    return value if isinstance(value, str) else None


def _int_label(pod: Pod, key: str) -> int | None:
    value = _label(pod, key)
    return int(value) if value is not None and value.isdigit() else None


def role_of(pod: Pod) -> str | None:
    """The dtjob.io/role label."""
    return _label(pod, LABEL_ROLE)


def index_of(pod: Pod) -> int | None:
    """The dtjob.io/role-index label as a number."""
    return _int_label(pod, LABEL_ROLE_INDEX)


def generation_of(pod: Pod) -> int | None:
    """The dtjob.io/generation label as a number (None for a pod without one)."""
    return _int_label(pod, LABEL_GENERATION)


def node_of(pod: Pod) -> str | None:
    """spec.nodeName (None before the pod is scheduled)."""
    value = (pod.get("spec") or {}).get("nodeName")
    return value if isinstance(value, str) else None


def phase_of(pod: Pod) -> str:
    """status.phase (Pending when the API has not reported one yet)."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminating(pod: Pod) -> bool:
    """Deletion has begun (deletionTimestamp set): the pod is on its way out."""
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def is_finished(pod: Pod) -> bool:
    """The pod's containers have all ended (Succeeded or Failed)."""
    return phase_of(pod) in FINISHED_PHASES


def is_ready(pod: Pod) -> bool:
    """Running and its Ready condition is True."""
    if phase_of(pod) != "Running":
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def trainer_termination(pod: Pod) -> tuple[str, Mapping[str, Any]] | None:
    """(container name, state.terminated) of the trainer container, else of the first
    terminated container; None while nothing has terminated."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    terminated = [
        (str(cs.get("name")), cs["state"]["terminated"])
        for cs in statuses
        if isinstance((cs.get("state") or {}).get("terminated"), Mapping)
    ]
    for name, state in terminated:
        if name == TRAINER_CONTAINER:
            return name, state
    return terminated[0] if terminated else None


def gang_of(pods: Iterable[Pod], generation: int) -> list[Pod]:
    """The live pods of gang `generation`: that generation and not being deleted."""
    return [p for p in pods if generation_of(p) == generation and not is_terminating(p)]


def stale_pods(pods: Iterable[Pod], generation: int) -> list[Pod]:
    """Pods that must be gone before gang `generation` may be (re)created under the same
    names: being deleted, or of another generation."""
    return [p for p in pods if generation_of(p) != generation or is_terminating(p)]


def live_names(pods: Iterable[Pod]) -> list[str]:
    """Names of the pods not yet being deleted (what a delete should target)."""
    return sorted(name_of(p) for p in pods if not is_terminating(p))
