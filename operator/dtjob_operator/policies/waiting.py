"""Why a gang is not running: the first pod that says so, in Kubernetes' own words.

The answer lives on the pods (a container's waiting reason, the scheduler's PodScheduled
condition); the job shows it in its Running=False condition, its REASON column and an event
when it changes, so `kubectl get dtj` answers "why is my job not running?" without
`kubectl describe pod`. Container problems come before scheduling ones (a pod that cannot
pull its image will not be helped by a free node), then by pod name for a stable answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dtjob_operator.policies.pods import Pod, is_ready, name_of

# Waiting reasons that mean the container will not start without someone acting (or only
# after a back-off); ContainerCreating and PodInitializing are progress, not problems.
PROBLEM_REASONS = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "PreCreateHookError",
        "PreStartHookError",
    }
)
UNSCHEDULABLE = "Unschedulable"
MESSAGE_LIMIT = 400


@dataclass(frozen=True)
class Waiting:
    """One pod's reason for not running."""

    reason: str
    """ImagePullBackOff, ErrImagePull, CrashLoopBackOff, ..., or Unschedulable."""
    message: str
    """Names the pod (and container) and carries the kubelet's or scheduler's message."""


def why_not_running(gang: Iterable[Pod]) -> Waiting | None:
    """The reason the gang is not all ready, or None when no pod says (still starting)."""
    pods = sorted((p for p in gang if not is_ready(p)), key=name_of)
    for pod in pods:
        found = _container_problem(pod)
        if found is not None:
            return found
    for pod in pods:
        found = _unschedulable(pod)
        if found is not None:
            return found
    return None


def _container_problem(pod: Pod) -> Waiting | None:
    status: Mapping[str, Any] = pod.get("status") or {}
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in PROBLEM_REASONS:
            detail = _short(str(waiting.get("message") or ""))
            text = f"pod {name_of(pod)} container {cs.get('name')}: {reason}"
            return Waiting(str(reason), f"{text}: {detail}" if detail else text)
    return None


def _unschedulable(pod: Pod) -> Waiting | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == UNSCHEDULABLE
        ):
            detail = _short(str(c.get("message") or ""))
            text = f"pod {name_of(pod)} cannot be scheduled"
            return Waiting(UNSCHEDULABLE, f"{text}: {detail}" if detail else text)
    return None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."
