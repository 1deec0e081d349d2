"""Every label key, annotation key, condition type and reason the operator writes.

Other modules import these names and never spell the strings themselves, so a rename is
one edit and a grep for a constant finds every reader and writer.

Conditions (Kubernetes style, on `status.conditions`). A condition appears the first time it
becomes relevant and is then kept up to date; `lastTransitionTime` moves only when its
status flips.

- Admitted: True when the whole gang may be created (Admitted); False while it waits
  (WaitingForAdmission, Inadmissible, PodsReadyTimeout, Preempted).
- Running: True when every pod of the current gang is Running and Ready (PodsReady);
  False with PodsNotReady while starting, a pod's own reason (ImagePullBackOff,
  FailedMount, FailedAttachVolume, Unschedulable, ...; policies/waiting.py), CreateFailed /
  ChildConflict while a create is refused or blocked, or with the reason of whatever
  stopped the gang.
- Restarting: True while a gang restart is under way: old pods going, backoff, new gang not
  yet ready (PodFailedRetryable, Preempted, RendezvousTimeout, PeerLost, Disrupted,
  Stalled).
- Suspended: True while spec.suspend holds the job without pods (Suspended / Resumed).
- Succeeded: terminal success (AllWorkersSucceeded, AllStagesSucceeded).
- Failed: terminal failure (InvalidSpec, PodFailedPermanent, BackoffLimitExceeded,
  DeadlineExceeded). InvalidSpec also when the API server refuses a pod for good (422,
  Pod Security, a missing PriorityClass), with the API server's message.
- CheckpointStorage: True when checkpoints survive a gang restart (Persistent); False with
  EphemeralCheckpoints, ClaimNotFound, ClaimTerminating, ClaimPending, ClaimLost or
  ClaimNotShareable
  (policies/checkpoint_storage.py).

Child objects carry owner references to the job and no finalizers: Kubernetes' garbage
collector deletes them with the job, and a job can always be deleted even when the operator
is down.
"""

from typing import Final

from dtjob_api.contract import (
    CHECKPOINT_VOLUME as CHECKPOINT_VOLUME,
)
from dtjob_api.contract import (
    CONFIG_MOUNT_DIR as CONFIG_MOUNT_DIR,
)
from dtjob_api.contract import (
    CONFIG_VOLUME as CONFIG_VOLUME,
)

# The names the API's rules share with the operator live in dtjob_api (one spelling each).
from dtjob_api.contract import (
    DOMAIN as DOMAIN,
)
from dtjob_api.contract import (
    LABEL_MANAGED_BY as LABEL_MANAGED_BY,
)
from dtjob_api.contract import (
    RENDEZVOUS_PORT_NAME as RENDEZVOUS_PORT_NAME,
)
from dtjob_api.contract import (
    RESERVED_PREFIX as RESERVED_PREFIX,
)
from dtjob_api.contract import (
    SHM_MOUNT_PATH as SHM_MOUNT_PATH,
)
from dtjob_api.contract import (
    SHM_VOLUME as SHM_VOLUME,
)
from dtjob_api.contract import (
    TRAINER_CONTAINER as TRAINER_CONTAINER,
)
from dtjob_api.status import REASON_STALLED as _REASON_STALLED

# --- labels ------------------------------------------------------------------------------
LABEL_JOB_NAME: Final = f"{DOMAIN}/job-name"
LABEL_ROLE: Final = f"{DOMAIN}/role"
LABEL_ROLE_INDEX: Final = f"{DOMAIN}/role-index"
# The gang generation: equal to status.restarts when the pod was created. Pods of an older
# generation are leftovers of a gang that is being torn down.
LABEL_GENERATION: Final = f"{DOMAIN}/generation"
# A pod's index within its Kueue podSet (0..count-1): Kueue's TAS ungater places pods in
# topology order by it (the Workload's podIndexLabel), so consecutive ranks share a domain.
LABEL_POD_SET_INDEX: Final = f"{DOMAIN}/pod-set-index"
MANAGED_BY: Final = "dtjob-operator"

# --- annotations (informational: for people reading `kubectl describe pod`) ----------------
ANNOTATION_RANK: Final = f"{DOMAIN}/rank"
ANNOTATION_WORLD_SIZE: Final = f"{DOMAIN}/world-size"

# --- condition types -----------------------------------------------------------------------
CONDITION_ADMITTED: Final = "Admitted"
CONDITION_RUNNING: Final = "Running"
CONDITION_RESTARTING: Final = "Restarting"
CONDITION_SUSPENDED: Final = "Suspended"
CONDITION_SUCCEEDED: Final = "Succeeded"
CONDITION_FAILED: Final = "Failed"
CONDITION_CHECKPOINT_STORAGE: Final = "CheckpointStorage"

STATUS_TRUE: Final = "True"
STATUS_FALSE: Final = "False"

# --- condition reasons (also used as event reasons) --------------------------------------
REASON_ADMITTED: Final = "Admitted"
REASON_WAITING_FOR_ADMISSION: Final = "WaitingForAdmission"
# The gang can never fit: more than its namespace quota's hard limit, or more than the
# Ready nodes could hold if empty. It waits without blocking the jobs behind it.
REASON_INADMISSIBLE: Final = "Inadmissible"
# An admitted gang whose pods were not all ready within the pods-ready timeout: released
# and re-queued with backoff.
REASON_PODS_READY_TIMEOUT: Final = "PodsReadyTimeout"
REASON_PODS_READY: Final = "PodsReady"
REASON_PODS_NOT_READY: Final = "PodsNotReady"
REASON_POD_FAILED_RETRYABLE: Final = "PodFailedRetryable"
REASON_POD_FAILED_PERMANENT: Final = "PodFailedPermanent"
# Retryable failures with a known cause get their own reason (see docs/env-contract.md).
# Exit 143 (SIGTERM, checkpoint written); also the reason of a job suspended by admission
# for a higher-priority one.
REASON_PREEMPTED: Final = "Preempted"
REASON_RESIZED: Final = "Resized"
REASON_RENDEZVOUS_TIMEOUT: Final = "RendezvousTimeout"  # exit 200
REASON_PEER_LOST: Final = "PeerLost"  # exit 201
# A gang member was disrupted (DisruptionTarget: eviction, preemption, drain, taint
# manager, pod GC) or lost with its node: the gang restarts without counting against
# backoffLimit.
REASON_DISRUPTED: Final = "Disrupted"
# A Running gang's reported step stood still past its progress deadline (policies/stall.py):
# restarted from its checkpoint like a retryable failure, counted against backoffLimit. The
# CLI reads it too, so it is spelled once in dtjob_api.
REASON_STALLED: Final = _REASON_STALLED
REASON_NODE_AVOIDED: Final = "NodeAvoided"
REASON_STRAGGLER: Final = "Straggler"
REASON_BACKOFF_LIMIT_EXCEEDED: Final = "BackoffLimitExceeded"
REASON_DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
REASON_SUSPENDED: Final = "Suspended"
REASON_RESUMED: Final = "Resumed"
REASON_ALL_WORKERS_SUCCEEDED: Final = "AllWorkersSucceeded"
REASON_ALL_STAGES_SUCCEEDED: Final = "AllStagesSucceeded"
REASON_INVALID_SPEC: Final = "InvalidSpec"
# CheckpointStorage reasons (policies/checkpoint_storage.py says what each means).
REASON_PERSISTENT_CHECKPOINTS: Final = "Persistent"
REASON_EPHEMERAL_CHECKPOINTS: Final = "EphemeralCheckpoints"
REASON_CLAIM_NOT_FOUND: Final = "ClaimNotFound"
REASON_CLAIM_TERMINATING: Final = "ClaimTerminating"
REASON_CLAIM_PENDING: Final = "ClaimPending"
REASON_CLAIM_LOST: Final = "ClaimLost"
REASON_CLAIM_NOT_SHAREABLE: Final = "ClaimNotShareable"
# The API server refused to create a child for a reason that may clear (quota, throttling,
# 5xx, a webhook timing out): the create is retried with backoff (Running=False).
REASON_CREATE_FAILED: Final = "CreateFailed"
# An object with a child's name exists and is not this job's (an earlier job's of the same
# name, or nobody's): the job waits and does not use it (policies/ownership.py).
REASON_CHILD_CONFLICT: Final = "ChildConflict"

# --- event-only reasons --------------------------------------------------------------------
EVENT_CREATED: Final = "Created"  # a gang's pods were created
EVENT_TTL_EXPIRED: Final = "TTLExpired"  # the finished job is deleted
REASON_RECONCILE_ERROR: Final = "ReconcileError"  # a reconcile failed unforeseen; retried
EVENT_NORMAL: Final = "Normal"
EVENT_WARNING: Final = "Warning"

# --- the trainer container and its mounts ----------------------------------------------------
CONFIG_KEY: Final = "config.json"
CONFIG_PATH: Final = f"{CONFIG_MOUNT_DIR}/{CONFIG_KEY}"
PROGRESS_KEY: Final = "progress.json"
# The loss history rank 0 writes (docs/env-contract.md "Loss history"): rows in HISTORY_COLUMNS
# order, at most 512, every `stride`-th logged step. The operator only creates it.
HISTORY_KEY: Final = "history.json"
HISTORY_COLUMNS: Final = ("step", "loss", "accuracy", "samplesPerSecond", "lr", "time")
# The container's default terminationMessagePath: torchrun's error file goes there, so the
# failing child's exit code reaches the pod status (policies/launcher_exit.py).
TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"
DEFAULT_TRAINER_COMMAND: Final = ("python", "-m", "dtjob_trainer", "run")

# Ordered so that rank 0 is worker-0, or stage-0 for the pipeline strategies, and parameter
# servers take the highest ranks (docs/env-contract.md "Rank order").
ROLE_ORDER: Final = ("worker", "stage", "ps")

# Kueue (operator/kueue/): the API the Workloads are written in, and the job label that
# puts a job in a LocalQueue.
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
KUEUE_QUEUE_LABEL: Final = f"{KUEUE_GROUP}/queue-name"
REASON_WAITING_FOR_KUEUE: Final = "WaitingForKueue"
REASON_NO_LOCAL_QUEUE: Final = "NoLocalQueue"
# MultiKueue (kueue/multikueue.py): a job sent to a queue that dispatches to other clusters
# without spec.managedBy; a worker's copy whose Workload is not there (yet) or not its own;
# and, on the manager, the Events that say where a dispatched job is.
REASON_MANAGED_BY_REQUIRED: Final = "ManagedByRequired"
REASON_PREBUILT_WORKLOAD: Final = "WaitingForPrebuiltWorkload"
REASON_DISPATCHED: Final = "Dispatched"
# Kueue (or an admin: kueuectl stop workload) deactivated the job's Workload: its gang stops
# and the job stays Suspended until the Workload is active again.
REASON_DEACTIVATED: Final = "Deactivated"
# The job's admission went away under a gang that holds pods (its Workload deleted, or not
# admitted any more; its queue label added or removed): the gang stops, and the job queues
# again once its pods are gone, never holding pods beside a new admission.
REASON_ADMISSION_WITHDRAWN: Final = "AdmissionWithdrawn"
# Kueue's admission cannot be applied to the pods (an admission check's podSetUpdate
# conflicts with them): the Workload is Finished (FailedToStart) and the job fails.
REASON_ADMISSION_CONFLICT: Final = "AdmissionConflict"
# On a Workload the operator deactivated for the job's own spec.suspend (and only then):
# resuming the job activates it again; a Workload deactivated without it stays so.
ANNOTATION_SUSPENDED_BY_JOB: Final = f"{DOMAIN}/deactivated-for-suspend"
