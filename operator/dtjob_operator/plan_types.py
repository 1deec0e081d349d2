"""What the lifecycle planner reads (Observed) and returns (Plan, Event): plain data shared by
the pure planner (lifecycle.py) and the executor (reconcile.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dtjob_operator.builders import Manifest
from dtjob_operator.constants import REASON_WAITING_FOR_ADMISSION
from dtjob_operator.kueue.verdict import Placement
from dtjob_operator.policies.create_errors import CreateError


@dataclass(frozen=True, kw_only=True)
class Observed:
    """Everything the planner looks at, read by the executor just before."""

    job: Mapping[str, Any]
    """The DistributedTrainingJob as the API returns it (metadata, spec, status)."""
    pods: Sequence[Mapping[str, Any]] = ()
    """The job's pods (label dtjob.io/job-name, owned by this job), any generation."""
    gone_pods: Sequence[Mapping[str, Any]] = ()
    """While the gang is up, the last state of its members that vanished without the
    reconcile having seen them go (gone_pods.py): a pod force-deleted off a dead node is
    judged by the node it ran on and its DisruptionTarget condition, not as a failure."""
    children: Set[tuple[str, str]] = frozenset()
    """(kind, name) of the other children that exist: ServiceAccount, Role, RoleBinding,
    ConfigMap, Service."""
    progress: Mapping[str, Any] | None = None
    """The parsed progress.json the trainer wrote, or None."""
    now: datetime
    """The current time (timezone-aware)."""
    admitted: bool = True
    """Gang admission: False holds a job that has no gang yet in phase Queued (no pods)."""
    admission_message: str = ""
    """Why the job is not admitted yet (shown in the Admitted condition)."""
    admission_reason: str = REASON_WAITING_FOR_ADMISSION
    """Reason of the Admitted=False condition while the job waits."""
    admitted_message: str = ""
    """Who admitted the gang and where, when a queue manager did (Kueue: the ClusterQueue
    and the flavors); said in the Admitted=True condition and, once, in an Event."""
    domain: str | None = None
    """Where the built-in admission placed the gang (status.admission.domain)."""
    elastic_size: int | None = None
    """The worker pods the built-in admission gave an elastic job (status.elastic)."""
    resize: tuple[int, str] | None = None
    """The admission resizes this running elastic job: (worker pods, why)."""
    kueue: bool = False
    """Kueue admits the job (its queue label, or the operator's admission mode "kueue")."""
    queue_position: int | None = None
    """The job's position in its namespace's admission queue while it waits."""
    preempted: str | None = None
    """Set by the admission to suspend this job for a higher-priority one: the message."""
    refit_pending: bool = False
    """An admitted gang restarted after a failure, not yet checked by an admission pass
    against what is free now: its pods wait (admission/controller.py, _awaits_refit)."""
    checkpoint_claim: Mapping[str, Any] | None = None
    """The PersistentVolumeClaim spec.checkpoint.claimName names, as the API returns it;
    None when the job names none or the claim does not exist."""
    lost_nodes: Set[str] = frozenset()
    """Names of the nodes the job's pods are on that are NotReady, Unknown, gone, or tainted
    node.kubernetes.io/out-of-service: no kubelet there will confirm a pod's end."""
    pod_events: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    """pod name -> the core/v1 Events about it, read only for the current gang's pods that
    hang in ContainerCreating (policies/waiting.pods_to_ask): a volume that cannot be
    mounted or attached is said nowhere else."""
    create_error: CreateError | None = None
    """The API server refused a create of this pass's plan: the executor plans again with
    it, and the planner fails the job (permanent) or says why it waits (transient)."""
    placements: Mapping[str, Placement] = field(default_factory=dict)
    """pod name -> what a queue manager's admission adds to that pod (Kueue: the flavors'
    node labels and tolerations, its labels; kueue/verdict.py), merged in when it is made."""


@dataclass(frozen=True)
class Event:
    """A Kubernetes event on the job, for a transition."""

    type: str
    """Normal or Warning."""
    reason: str
    message: str


@dataclass
class Plan:
    """What the executor should do, in this order: create, delete pods, delete the job,
    patch the status (only if it differs), record events, requeue."""

    status: dict[str, Any]
    """The full desired status (camelCase)."""
    create: list[Manifest] = field(default_factory=list)
    """Manifests of missing children, in creation order; creating one that exists is a no-op."""
    delete_pods: list[str] = field(default_factory=list)
    """Names of pods to delete."""
    force_delete_pods: list[str] = field(default_factory=list)
    """Names of pods to delete with grace period 0 (terminating on a lost node)."""
    delete_job: bool = False
    """The finished job's TTL has passed: delete it (its children go with it)."""
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    """Seconds until a time-based transition (backoff, deadline, TTL) or the next periodic
    look; None when only a watch event can change anything."""
