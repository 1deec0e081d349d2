"""Why a scheduled pod hangs in ContainerCreating: its volumes, in Kubernetes' own words.

A volume the kubelet cannot mount (a Secret, ConfigMap or claim that does not exist, an NFS
server that refuses) or the attach/detach controller cannot attach (a ReadWriteOnce volume
attached to another node: "Multi-Attach error") is never written into the pod's status: its
containers just wait in ContainerCreating, for ever. The cause is only in core/v1 Events on
the pod (FailedMount, FailedAttachVolume). The executor reads the Events of the pods
`is_creating` picks (one list per pod), and `volume_failure` picks the one that still holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dtjob_operator.policies.pods import Pod, is_ready, is_terminating, node_of
from dtjob_operator.policies.times import parse_time

FAILED_MOUNT = "FailedMount"
FAILED_ATTACH = "FailedAttachVolume"
VOLUME_REASONS = frozenset({FAILED_MOUNT, FAILED_ATTACH})
# What the kubelet reports while a pod's volumes (or init containers) are not ready yet.
CREATING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
# The kubelet pulls images and creates containers only once every volume is mounted (and
# attached): a failure older than one of these is history, even if the pod still waits
# (a slow image pull also reads ContainerCreating).
PROGRESS_REASONS = frozenset({"Pulling", "Pulled", "Created", "Started"})
# After ~2 minutes of retries the kubelet sums up: "Unable to attach or mount volumes:
# unmounted volumes=[x] ...: timed out waiting for the condition". It names the volume, not
# the cause (secret "x" not found, Multi-Attach), so a specific event wins when there is one.
GENERIC_PREFIX = "Unable to attach or mount volumes"
_NEVER = datetime.min.replace(tzinfo=UTC)

Event = Mapping[str, Any]


@dataclass(frozen=True)
class VolumeFailure:
    """The event that says why a pod's volumes are not ready."""

    reason: str
    """FailedMount or FailedAttachVolume."""
    message: str
    """The kubelet's or the attach/detach controller's message, as written."""


def is_creating(pod: Pod) -> bool:
    """Scheduled, not ready, not on its way out, and a container still waits in
    ContainerCreating or PodInitializing: the only state in which a volume holds it up."""
    if node_of(pod) is None or is_ready(pod) or is_terminating(pod):
        return False
    status: Mapping[str, Any] = pod.get("status") or {}
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    return any(
        ((cs.get("state") or {}).get("waiting") or {}).get("reason") in CREATING_REASONS
        for cs in statuses
    )


def volume_failure(pod: Pod, events: Iterable[Event]) -> VolumeFailure | None:
    """The latest FailedMount / FailedAttachVolume event about this pod (not an earlier pod
    of the same name: gang restarts reuse names) that nothing since has overtaken; None when
    there is none or the pod is not waiting in ContainerCreating any more."""
    if not is_creating(pod):
        return None
    uid = (pod.get("metadata") or {}).get("uid")
    mine = [e for e in events if _about(e, uid)]
    progress = max((_when(e) for e in mine if e.get("reason") in PROGRESS_REASONS), default=None)
    failures = [
        e
        for e in mine
        if e.get("reason") in VOLUME_REASONS and (progress is None or _when(e) > progress)
    ]
    if not failures:
        return None
    # Specific before the kubelet's generic summary, then the latest.
    best = max(failures, key=lambda e: (not _is_generic(e), _when(e)))
    return VolumeFailure(str(best["reason"]), str(best.get("message") or ""))


def _about(event: Event, uid: object) -> bool:
    obj = event.get("involvedObject") or {}
    if obj.get("kind") not in (None, "Pod"):
        return False
    # An event without a uid cannot be told apart; one with another uid is a predecessor's.
    return not uid or not obj.get("uid") or obj.get("uid") == uid


def _is_generic(event: Event) -> bool:
    return str(event.get("message") or "").startswith(GENERIC_PREFIX)


def _when(event: Event) -> datetime:
    """When the event last happened: a repeated event keeps its object and moves lastTimestamp
    (or series.lastObservedTime for events.k8s.io-style writers)."""
    series = event.get("series") or {}
    for value in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        moment = parse_time(value)
        if moment is not None:
            return moment
    return _NEVER
