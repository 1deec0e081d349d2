"""What the lifecycle planner reads (Observed) and returns (Plan, Event): plain data shared by
the pure planner (lifecycle.py) and the executor (reconcile.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dtjob_operator.admission.seam import AdmissionVerdict
from dtjob_operator.builders import Manifest
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
    admission: AdmissionVerdict = field(default_factory=AdmissionVerdict)
    """What the backend that holds the job says (admission/seam.py): admitted or why it
    waits, a gang to stop, the size and the placement of its pods."""
    checkpoint_claim: Mapping[str, Any] | None = None
    """The PersistentVolumeClaim spec.checkpoint.claimName names, as the API returns it;
    None when the job names none or the claim does not exist."""
    lost_nodes: Set[str] = frozenset()
    suspect_nodes: Set[str] = frozenset()
    """Nodes every job keeps off (suspects.py): the next pods get a NotIn affinity."""
    """Names of the nodes the job's pods are on that are NotReady, Unknown, gone, or tainted
    node.kubernetes.io/out-of-service: no kubelet there will confirm a pod's end."""
    pod_events: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    """pod name -> the core/v1 Events about it, read only for the current gang's pods that
    hang in ContainerCreating (policies/waiting.pods_to_ask): a volume that cannot be
    mounted or attached is said nowhere else."""
    create_error: CreateError | None = None
    """The API server refused a create of this pass's plan: the executor plans again with
    it, and the planner fails the job (permanent) or says why it waits (transient)."""
    stall_evidence: str | None = None
    """Whom a stall points at, once the executor has found out (the rank that stopped first,
    its pod and node, the call it waits in): added to the Stalled message. None: unknown."""


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
    delete_grace_seconds: int | None = None
    """Their grace period when not their own terminationGracePeriodSeconds (a stalled gang's:
    its ranks are stuck and cannot checkpoint on SIGTERM, so waiting it out is GPU time
    lost)."""
    force_delete_pods: list[str] = field(default_factory=list)
    """Names of pods to delete with grace period 0 (terminating on a lost node)."""
    delete_job: bool = False
    """The finished job's TTL has passed: delete it (its children go with it)."""
    events: list[Event] = field(default_factory=list)
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    """GPU-seconds this pass closed into the goodput ledger, per bucket (the counters)."""
    requeue_after: float | None = None
    """Seconds until a time-based transition (backoff, deadline, TTL) or the next periodic
    look; None when only a watch event can change anything."""
