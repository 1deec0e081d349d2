"""Checkpoint storage policy: will the job's checkpoints survive a gang restart? Pure.

`judge_checkpoint_storage(spec, gang_size, namespace, claim)` looks at spec.checkpoint and,
when the job names a PersistentVolumeClaim, at that claim as the API returns it (None when it
does not exist), and says what the CheckpointStorage condition reads and whether the gang
may start. The reasons, from best to worst:

- Persistent (True): a bound claim every pod of the gang can mount.
- EphemeralCheckpoints (False): no claim; checkpoints go to an emptyDir per pod, which a
  gang restart (new pods) loses. The job runs: short jobs and jobs that never restart do
  not need more.
- ClaimPending / ClaimLost (False): the claim exists but is not bound. The gang still
  starts: with a WaitForFirstConsumer StorageClass a claim binds only once a pod using it
  is scheduled, so waiting for the binding would wait forever.
- ClaimNotShareable (False): a ReadWriteOnce claim and more than one pod. The gang starts
  (all its pods may land on one node, where they share the volume), but pods on different
  nodes fail to mount it (Multi-Attach error), which users would otherwise find only in pod
  events.
- ClaimNotFound (False): no such claim. The gang waits (pods would hang in
  ContainerCreating with FailedMount) and starts once the claim exists.
- ClaimTerminating (False): the claim is being deleted. Pods that still mount it keep it
  (PVC protection); a new gang waits, as the scheduler refuses pods that mount it.
- ReadWriteOncePod with more than one pod can never work (one pod at a time, cluster-wide):
  the job fails with InvalidSpec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_operator.constants import (
    EVENT_NORMAL,
    EVENT_WARNING,
    REASON_CLAIM_LOST,
    REASON_CLAIM_NOT_FOUND,
    REASON_CLAIM_NOT_SHAREABLE,
    REASON_CLAIM_PENDING,
    REASON_CLAIM_TERMINATING,
    REASON_EPHEMERAL_CHECKPOINTS,
    REASON_PERSISTENT_CHECKPOINTS,
)

RWX = "ReadWriteMany"
RWO = "ReadWriteOnce"
RWOP = "ReadWriteOncePod"


@dataclass(frozen=True)
class StorageVerdict:
    """What the CheckpointStorage condition says, and what it means for the gang."""

    ok: bool
    """The condition's status: True only when checkpoints survive a gang restart."""
    reason: str
    message: str
    event_type: str
    """Normal or Warning: the type of the event recorded when the reason changes."""
    blocks_start: bool = False
    """The gang must not be created yet (its pods could not mount the volume)."""
    invalid: bool = False
    """The job can never run with this claim: it fails with InvalidSpec."""


def judge_checkpoint_storage(
    spec: DistributedTrainingJobSpec,
    gang_size: int,
    namespace: str,
    claim: Mapping[str, Any] | None,
    dispatched_from: str | None = None,
) -> StorageVerdict:
    """The CheckpointStorage verdict for a job whose gang has `gang_size` pods; `claim` is
    the PersistentVolumeClaim named by spec.checkpoint.claimName, None when it is missing
    (ignored when the job names none). `dispatched_from`: the manager cluster a
    MultiKueue copy came from, whose objects did not travel with it."""
    name = spec.checkpoint.claimName
    if not name:
        return StorageVerdict(
            ok=False,
            reason=REASON_EPHEMERAL_CHECKPOINTS,
            message=(
                "checkpoints go to an emptyDir in each pod and are not kept across gang "
                "restarts; set spec.checkpoint.claimName to a ReadWriteMany "
                "PersistentVolumeClaim to resume after a restart"
            ),
            event_type=EVENT_NORMAL,
        )
    if claim is None:
        return StorageVerdict(
            ok=False,
            reason=REASON_CLAIM_NOT_FOUND,
            message=(
                f"spec.checkpoint.claimName: PersistentVolumeClaim {name!r} does not exist "
                f"in namespace {namespace!r}; the pods are created once it exists (create "
                "it, or fix the name)"
                + (
                    f". This is the copy MultiKueue dispatched from {dispatched_from!r}: the "
                    "objects a job names (claims, ConfigMaps, Secrets) do not travel with "
                    "it and must exist on this worker cluster too (docs/multikueue.md)"
                    if dispatched_from
                    else ""
                )
            ),
            event_type=EVENT_WARNING,
            blocks_start=True,
        )
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        return StorageVerdict(
            ok=False,
            reason=REASON_CLAIM_TERMINATING,
            message=(
                f"spec.checkpoint.claimName: claim {name!r} is being deleted; pods that "
                "mount it keep it until they end, and a new gang waits until a claim of "
                "that name exists again"
            ),
            event_type=EVENT_WARNING,
            blocks_start=True,
        )
    modes = access_modes(claim)
    if RWOP in modes and RWX not in modes and RWO not in modes and gang_size > 1:
        return StorageVerdict(
            ok=False,
            reason=REASON_CLAIM_NOT_SHAREABLE,
            message=(
                f"spec.checkpoint.claimName: claim {name!r} is ReadWriteOncePod, which one "
                f"pod at a time may mount, and the gang has {gang_size} pods: use a "
                "ReadWriteMany claim"
            ),
            event_type=EVENT_WARNING,
            invalid=True,
        )
    phase = (claim.get("status") or {}).get("phase") or "Pending"
    if phase == "Lost":
        return StorageVerdict(
            ok=False,
            reason=REASON_CLAIM_LOST,
            message=(
                f"claim {name!r} lost its PersistentVolume (status.phase Lost): checkpoints "
                "cannot be written or read until an admin restores the volume"
            ),
            event_type=EVENT_WARNING,
        )
    if phase != "Bound":
        return StorageVerdict(
            ok=False,
            reason=REASON_CLAIM_PENDING,
            message=(
                f"claim {name!r} is not bound to a volume yet (status.phase {phase}); pods "
                "that mount it wait until it is. A WaitForFirstConsumer StorageClass binds "
                "it once the first pod is scheduled; otherwise check `kubectl describe pvc "
                f"{name}`"
            ),
            event_type=EVENT_NORMAL,
        )
    if RWX not in modes and gang_size > 1:
        return StorageVerdict(
            ok=False,
            reason=REASON_CLAIM_NOT_SHAREABLE,
            message=(
                f"pods on different nodes cannot mount ReadWriteOnce claim {name!r} (the "
                f"gang has {gang_size} pods): use a ReadWriteMany claim, or run the job on "
                "one node"
            ),
            event_type=EVENT_WARNING,
        )
    return StorageVerdict(
        ok=True,
        reason=REASON_PERSISTENT_CHECKPOINTS,
        message=f"checkpoints go to claim {name!r} and survive gang restarts",
        event_type=EVENT_NORMAL,
    )


def access_modes(claim: Mapping[str, Any]) -> frozenset[str]:
    """The claim's access modes: those of the bound volume (status) when known, else the
    requested ones (spec)."""
    status_modes = (claim.get("status") or {}).get("accessModes")
    modes = status_modes or (claim.get("spec") or {}).get("accessModes") or ()
    return frozenset(str(m) for m in modes)
