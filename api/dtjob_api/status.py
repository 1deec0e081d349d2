"""The status of a DistributedTrainingJob, written by the operator only."""

from enum import StrEnum

from pydantic import Field

from dtjob_api.base import ApiModel


class JobPhase(StrEnum):
    """Where the job is in its life."""

    PENDING = "Pending"
    QUEUED = "Queued"
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


TERMINAL_PHASES = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED})
# How the Admitted condition's message begins when Kueue admitted the job: the operator
# writes it (kueue/verdict.py), `kubectl dtj why` reads it (client growth.py).
KUEUE_ADMITTED_MESSAGE = "admitted by Kueue"
# The reason of a gang restarted because its step stood still past its progress deadline:
# the operator writes it (constants.REASON_STALLED), `kubectl dtj why` reads it.
REASON_STALLED = "Stalled"
# Values of progress.json's `activity` key during which a still step is expected (a
# checkpoint being written, an evaluation pass): the operator's stall clock stops then.
# Not in status.progress: the CRD's size is a budget (test_crd.py).
PAUSED_ACTIVITIES = frozenset({"checkpointing", "evaluating"})


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    type: str
    """Condition type, e.g. Admitted, Running, Succeeded, Failed."""
    status: str = Field(pattern=r"^(True|False|Unknown)$")
    """True, False or Unknown."""
    reason: str
    """One-word CamelCase reason."""
    message: str = ""
    """Human-readable details."""
    lastTransitionTime: str
    """When the status last changed (RFC 3339)."""
    observedGeneration: int | None = None
    """The spec generation this condition was computed from."""


class ReplicaStatus(ApiModel):
    """Pod counts of one role."""

    total: int = 0
    """Pods the role should have."""
    active: int = 0
    """Pods that exist and have not finished."""
    ready: int = 0
    """Pods that are Running and ready."""
    succeeded: int = 0
    """Pods that exited 0."""
    failed: int = 0
    """Pods that failed."""


class Progress(ApiModel):
    """Training progress reported by rank 0."""

    step: int | None = None
    """Optimizer steps done."""
    totalSteps: int | None = None
    """Optimizer steps planned."""
    epoch: float | None = None
    """Passes over the training data."""
    loss: float | None = None
    """Latest training loss."""
    lossShort: str | None = None
    """The loss to 4 significant digits, as `kubectl get dtj` shows it (the operator's; the
    full value is `loss`)."""
    samplesPerSecond: float | None = None
    """Recent throughput."""
    etaSeconds: float | None = None
    """Estimated seconds to completion."""
    lastCheckpointStep: int | None = None
    """Step of the latest checkpoint."""
    lastCheckpointTime: str | None = None
    """When the latest checkpoint was written."""
    accuracy: float | None = None
    """Held-out accuracy at the end of training."""
    message: str | None = None
    """Trainer remark, e.g. which strategy Auto chose and why."""
    updateTime: str | None = None
    """When the trainer last reported."""


class ProgressWatch(ApiModel):
    """How long the Running gang's step has stood still, and the deadline."""

    # Terse docstrings: the CRD's size is a budget (test_crd.py).
    gang: int
    """Gang generation watched."""
    step: int | None = None
    """Last step seen."""
    since: str | None = None
    """Stall clock start; none: paused."""
    lastMoveTime: str | None = None
    """When the step last moved."""
    secondsPerStep: float | None = None
    """Learned seconds per step."""
    deadlineSeconds: int | None = None
    """Stall deadline in force."""
    straggler: int | None = None
    """Slowest straggling rank now."""


class AvoidedNode(ApiModel):
    """A node the job's next gangs keep off (docs/lifecycle.md, "Nodes that make gangs sick")."""

    node: str
    """Node name."""
    reason: str | None = None
    """What pointed at it."""
    until: str | None = None
    """When it may be used again."""


class LastFailure(ApiModel):
    """The pod whose failure decided the last gang restart, and its node."""

    pod: str | None = None
    """The failed pod."""
    node: str | None = None
    """The node it ran on."""
    time: str | None = None
    """When the restart began."""


class GpuSeconds(ApiModel):
    """GPU-seconds per bucket (dtjob_api/goodput.py)."""

    training: int | None = None
    """Running, less what restarts threw away: the goodput."""
    queued: int | None = None
    """Pending, Queued or Suspended."""
    starting: int | None = None
    """Starting."""
    restarting: int | None = None
    """Restarting after a failure or stall."""
    resizing: int | None = None
    """Restarting for a resize."""
    lostWork: int | None = None
    """Steps since the last checkpoint, lost by a restart."""
    stalled: int | None = None
    """Step stood still before a stall."""


class Goodput(ApiModel):
    """Where the job's GPU time went; the open segment is since/phase/gpus."""

    gpuSeconds: GpuSeconds | None = None
    """Closed segments, per bucket."""
    since: str | None = None
    """Open segment's start."""
    phase: str | None = None
    """Open segment's phase."""
    gpus: int | None = None
    """Open segment's GPUs."""
    resizing: bool | None = None
    """Open segment is a resize."""


class AdmissionBackendName(StrEnum):
    """Who decides that a job's gang may start (docs/admission.md, "Admission backends")."""

    BUILTIN = "builtin"
    KUEUE = "kueue"
    EXTERNAL = "external"


class AdmissionStatus(ApiModel):
    """What the gang admission did to the job (docs/admission.md)."""

    backend: AdmissionBackendName | None = None
    """Who admits the job: builtin (the operator's gang admission), kueue (a Kueue Workload,
    the job's kueue.x-k8s.io/queue-name label) or external (someone else; the operator
    only creates the gang)."""

    requeues: int = 0
    """Times the admitted gang was released because its pods were not all ready in time."""
    lastRequeueTime: str | None = None
    """When it was last released (the re-queue backoff counts from here)."""
    preemptions: int = 0
    """Times the job was suspended for a higher-priority job."""
    domain: str | None = None
    """Where the gang was placed: its smallest topology domain (<label>=<value>)."""


class ElasticStatus(ApiModel):
    """An elastic job's size (roles.worker.minReplicas .. replicas) and its resizes."""

    replicas: int = 0
    """Worker pods of the gang now (what the admission gave it)."""
    minReplicas: int = 0
    """roles.worker.minReplicas."""
    maxReplicas: int = 0
    """roles.worker.replicas."""
    resizes: int = 0
    """Resizes so far (growth and shrinking; none counts as a failure)."""
    lastResizeTime: str | None = None
    """When the last resize began."""
    lastResizeReason: str | None = None
    """Why, e.g. "grew from 2 to 4 workers into free capacity"."""


class DistributedTrainingJobStatus(ApiModel):
    """Observed state of the job."""

    phase: JobPhase = JobPhase.PENDING
    """Pending, Queued, Starting, Running, Restarting, Suspended, Succeeded or Failed."""
    strategy: str | None = None
    """The strategy that runs (the STRATEGY column): spec.strategy.type with a tf.distribute
    alias resolved, e.g. DataParallel for MirroredStrategy."""
    conditions: list[Condition] = Field(default_factory=list)
    """Latest observations of the job's state."""
    replicaStatuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    """Pod counts per role."""
    reason: str | None = None
    """Why the job is not running, in one word (the REASON column): the reason of the
    Running=False condition (ImagePullBackOff, Unschedulable, CreateFailed, Disrupted,
    BackoffLimitExceeded, ...), else of Admitted=False (WaitingForAdmission, ...)."""
    ready: str | None = None
    """Ready pods over total pods (the READY column)."""
    restarts: int = 0
    """Gang restarts so far, whatever their cause."""
    countedRestarts: int | None = None
    """The gang restarts charged against runPolicy.backoffLimit: restarts less those after
    a disruption (eviction, preemption, drain, a lost node) or an Ignore rule."""
    startTime: str | None = None
    """When the job's pods were first created."""
    completionTime: str | None = None
    """When the job reached Succeeded or Failed."""
    lastRestartTime: str | None = None
    """When the last gang restart began."""
    progress: Progress | None = None
    """Training progress from rank 0."""
    progressWatch: ProgressWatch | None = None
    """While Running: the stall watch."""
    goodput: Goodput | None = None
    """GPU time per bucket: training (goodput) and what was lost, by cause."""
    avoidedNodes: list[AvoidedNode] | None = Field(default=None, max_length=8)
    """Nodes a stall, a hardware fault or repeated failures pointed at, kept off by the next
    gangs for a time."""
    lastFailure: LastFailure | None = None
    """Where the failure that decided the last gang restart came from: a second failure in
    a row from the same node points at the node."""
    observedGeneration: int | None = None
    """The spec generation the status was computed from."""
    queuePosition: int | None = None
    """While waiting for admission: the job's place in its namespace's queue (1 is next)."""
    admission: AdmissionStatus | None = None
    """Re-queues and preemptions by the built-in admission."""
    elastic: ElasticStatus | None = None
    """An elastic job's size and resizes."""
