"""Why a gang is not running: the first pod that says so, in Kubernetes' own words.

The answer lives on the pods (a container's waiting reason, the scheduler's PodScheduled
condition) or, for a volume that cannot be mounted or attached, only in the Events about a
pod that hangs in ContainerCreating (policies/volume_events.py; the executor reads those for
the pods `pods_to_ask` names). The job shows it in its Running=False condition, its REASON
column and an event when it changes, so `kubectl get dtj` answers "why is my job not
running?" without `kubectl describe pod`. Container problems come first, then volumes (on a
node already: a free node helps neither), then scheduling; by pod name for a stable answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtjob_api.status import TERMINAL_PHASES
from dtjob_operator.policies.pods import Pod, gang_of, is_ready, name_of
from dtjob_operator.policies.volume_events import Event, is_creating, volume_failure

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
# Pods whose Events one pass reads at most: bounds the calls for a large gang that waits on
# a slow image pull (which reads ContainerCreating too). The first pods by name are the ones
# the answer would name anyway.
MAX_PODS_ASKED = 16
PodEvents = Mapping[str, Sequence[Event]]


@dataclass(frozen=True)
class Waiting:
    """One pod's reason for not running."""

    reason: str
    """ImagePullBackOff, ErrImagePull, CrashLoopBackOff, ..., FailedMount,
    FailedAttachVolume, or Unschedulable."""
    message: str
    """Names the pod (and container) and carries the kubelet's or scheduler's message."""


def why_not_running(gang: Iterable[Pod], pod_events: PodEvents | None = None) -> Waiting | None:
    """The reason the gang is not all ready, or None when no pod says (still starting).

    `pod_events`: pod name -> the Events read about it (for the pods `pods_to_ask` named)."""
    pods = sorted((p for p in gang if not is_ready(p)), key=name_of)
    for pod in pods:
        found = _container_problem(pod)
        if found is not None:
            return found
    for pod in pods:
        found = _volume_problem(pod, (pod_events or {}).get(name_of(pod), ()))
        if found is not None:
            return found
    for pod in pods:
        found = _unschedulable(pod)
        if found is not None:
            return found
    return None


def pods_to_ask(job: Mapping[str, Any], pods: Iterable[Pod]) -> list[str]:
    """Names of the current gang's pods whose Events the executor should read: those that
    hang in ContainerCreating (at most MAX_PODS_ASKED, by name). None at all when the job is
    finished, or when a container problem already answers (it would win anyway)."""
    status: Mapping[str, Any] = job.get("status") or {}
    if status.get("phase") in TERMINAL_PHASES:
        return []
    gang = sorted(gang_of(pods, int(status.get("restarts") or 0)), key=name_of)
    if any(_container_problem(p) is not None for p in gang if not is_ready(p)):
        return []
    return [name_of(p) for p in gang if is_creating(p)][:MAX_PODS_ASKED]


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


def _volume_problem(pod: Pod, events: Iterable[Event]) -> Waiting | None:
    failure = volume_failure(pod, events)
    if failure is None:
        return None
    detail = _short(failure.message)
    text = f"pod {name_of(pod)} is waiting for its volumes: {failure.reason}"
    return Waiting(failure.reason, f"{text}: {detail}" if detail else text)


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
