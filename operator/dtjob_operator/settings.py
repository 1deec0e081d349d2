"""Operator settings: cluster-wide defaults an admin sets once (Helm values -> DTJOB_* env).

Built once at start-up and passed to whatever needs it; nothing reads a global. Per-job
choices belong in the job spec; only what a job cannot or should not choose lives here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from dtjob_api.guard_rails import GuardRails
from dtjob_api.spec import QUANTITY_PATTERN


class OperatorSettings(BaseSettings):
    """Every DTJOB_* environment variable the operator reads."""

    model_config = SettingsConfigDict(env_prefix="DTJOB_", extra="ignore", frozen=True)

    trainer_image: str = "dtjob/trainer:0.1.0"
    """Image of the bundled trainer, used when a job sets no spec.trainer.image."""
    # NoDecode: "a,b" from a Helm value is friendlier than a JSON list in an env var.
    namespaces: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Namespaces to watch (DTJOB_NAMESPACES="a,b"); empty means the whole cluster."""
    metrics_port: int = Field(default=8000, ge=0, le=65535)
    """Port of the Prometheus /metrics endpoint; 0 turns it off."""
    liveness_endpoint: str = "http://0.0.0.0:8080/healthz"
    """Liveness endpoint (health.py): 503 when a reconcile is stuck or the watch loop is
    silent, so the kubelet restarts the pod; empty turns it off. The same server answers
    readiness on /readyz (the workers run and kopf's watches have started)."""
    liveness_stuck_seconds: float = Field(default=300.0, ge=10, le=86400)
    """A reconcile in flight longer than this makes the liveness endpoint fail (every API
    call has a timeout, so only something truly stuck gets there)."""
    job_metrics_limit: int = Field(default=1000, ge=0, le=100000)
    """Most jobs with per-job gauges (dtjob_job_step, _loss, ...) on /metrics; running jobs
    beyond it are counted in dtjob_job_metrics_left_out_jobs. Bounds the series a large
    cluster gives Prometheus (finished jobs have none)."""
    log_level: str = Field(default="INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$")
    """Python log level."""
    standalone: bool = False
    """Run as the only replica; false elects a leader through a coordination.k8s.io Lease
    so that of several replicas only one reconciles and admits at a time."""
    peering_name: str = "dtjob-operator"
    """Name of the leader-election Lease, shared by the replicas of one deployment."""
    workers: int = Field(default=4, ge=1, le=64)
    """Reconcile worker threads (each job is reconciled by one worker at a time)."""
    api_concurrency: int = Field(default=16, ge=1, le=128)
    """Concurrent API calls when creating or deleting a gang's pods."""
    default_shm_per_gpu: str = Field(default="1Gi", pattern=QUANTITY_PATTERN)
    """/dev/shm per GPU when a job sets no spec.network.shmSize (at least 1Gi per pod)."""
    default_nccl_socket_ifname: str = "eth0"
    """NCCL_SOCKET_IFNAME when a job sets none: the pod network's interface."""
    termination_grace_period_seconds: int = Field(default=60, ge=1, le=3600)
    """Grace period of trainer pods: time to write a checkpoint after SIGTERM."""
    pod_security_defaults: bool = True
    """Give pods the 'restricted' Pod Security Standard context (non-root uid 1000, no
    privilege escalation, all capabilities dropped, RuntimeDefault seccomp)."""
    # Guard rails (dtjob_api.guard_rails, docs/operator.md): a job that breaks one fails with
    # InvalidSpec naming the field and the setting.
    allow_host_path: bool = False
    """Allow hostPath volumes in job pod templates. Off: a hostPath volume gives the pod the
    node's files, which only a trusted namespace should have; the job fails with
    InvalidSpec naming the volume."""
    allow_host_namespaces: bool = False
    """Allow hostNetwork, hostPID and hostIPC in job pod templates (RDMA over the host
    network needs hostNetwork)."""
    allow_privileged: bool = False
    """Allow privileged containers and allowPrivilegeEscalation: true."""
    allowed_capabilities: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Linux capabilities a container may add (DTJOB_ALLOWED_CAPABILITIES="IPC_LOCK,..."):
    RDMA needs IPC_LOCK to pin memory. Empty: none."""
    allowed_priority_classes: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """PriorityClass names or globs a job may use (DTJOB_ALLOWED_PRIORITY_CLASSES="a,team-*").
    Empty: every class but system-* (whose pods preempt anything in the cluster)."""
    max_termination_grace_period_seconds: int = Field(default=300, ge=1, le=86400)
    """Longest terminationGracePeriodSeconds a pod template may set: a trainer that ignores
    SIGTERM keeps its GPUs that long through suspends, preemptions and gang restarts."""
    progress_sync_seconds: float = Field(default=300.0, gt=0, le=3600)
    """While a job starts or runs, how often it is looked at when nothing about it changed.
    Its pods and its progress ConfigMap are watched, so a change (progress included) is
    copied into status at once; timers the job asked for (activeDeadlineSeconds, the pods-
    ready timeout) fire on time, and what is read but not watched (pod Events while a pod
    hangs in ContainerCreating, a checkpoint claim, nodes under a terminating pod) is looked
    at every resync_seconds. This is only a safety net against a missed watch event, so it
    is long: each look at 1,000 running jobs costs the operator CPU, not requests (it was
    60 s: 3.3 % of a core at rest with 1,000 jobs x 8 pods, bench/results/api_load.json)."""
    force_delete_margin_seconds: float = Field(default=30.0, ge=0, le=3600)
    """A pod terminating on a lost node (NotReady, Unknown, gone, out-of-service) is
    force-deleted this long after its grace period ended (docs/lifecycle.md)."""
    avoid_node_seconds: float = Field(default=3600.0, ge=0, le=7 * 86400)
    """How long a job's next gangs keep off a node its stall or hardware fault pointed at
    (docs/lifecycle.md, "Nodes that make gangs sick"); 0: never avoid."""
    suspect_node_jobs: int = Field(default=2, ge=0, le=100)
    """A node that this many different jobs avoid at once (each for a restart that pointed
    at it) is avoided by every job until those avoidances expire; 0: only by those jobs."""
    taint_suspect_nodes: bool = False
    """Also taint such a node `dtjob.io/suspect:NoSchedule` for an admin to inspect
    (policies/suspect_taint.py): it keeps every workload off it until the admin removes the
    taint. Needs node patch rights (the chart grants them only with this on)."""
    resync_seconds: float = Field(default=10.0, gt=0, le=3600)
    """How often a job that waits for something unwatched (pods to vanish) is looked at."""

    admission: Literal["builtin", "kueue", "external"] = "builtin"
    """Gang admission: "builtin" admits a job only when its whole gang fits the namespace's
    ResourceQuota and the Ready nodes (docs/admission.md), and leaves a job labelled
    kueue.x-k8s.io/queue-name to Kueue (docs/kueue.md); "kueue" sends every job to Kueue;
    "external" leaves admission to someone else, who holds jobs with spec.suspend."""
    topology_levels: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    )
    """The cluster's topology as node labels, highest level first
    (DTJOB_TOPOLOGY_LEVELS="network.example.com/block,network.example.com/rack,
    kubernetes.io/hostname"): the built-in admission packs each gang into the smallest
    domain that holds it, and spec.placement.topology names one of these levels."""
    kueue_default_queue: str = Field(default="", pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    """admission "kueue": the LocalQueue of a job without the kueue.x-k8s.io/queue-name
    label; empty: such a job waits, its status saying to set the label."""
    pods_ready_timeout_seconds: float = Field(default=300.0, ge=0, le=86400)
    """Built-in admission: an admitted gang not all ready this long after its first pod was
    created is released and re-queued with backoff; 0 turns it off."""
    requeue_backoff_seconds: float = Field(default=10.0, ge=0, le=3600)
    """Delay before a released job may be admitted again; doubled per further re-queue."""
    max_requeue_backoff_seconds: float = Field(default=300.0, ge=0, le=86400)
    """Upper bound of the re-queue delay."""
    preemption: bool = True
    """Built-in admission: a job that does not fit may suspend lower-priority jobs of its
    namespace (PriorityClass preemptionPolicy: Never opts a class out)."""
    admission_min_interval_seconds: float = Field(default=0.1, ge=0, le=60)
    """Least time between two admission passes (bursts of events share one pass)."""
    leader_election_namespace: str | None = None
    """Namespace of the leader-election Lease when standalone is false (default: the
    operator pod's namespace from POD_NAMESPACE, else "default")."""
    leader_lease_seconds: float = Field(default=15.0, gt=0, le=600)
    """How long a leader's Lease lasts without renewal before another replica takes over."""

    network_policy: bool = False
    """Give each job a NetworkPolicy admitting traffic to its pods only from its own pods
    (rendezvous, NCCL, gloo); it takes effect where the network plugin enforces it."""
    api_connect_timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    """Connect timeout of every Kubernetes API call and watch."""
    api_read_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    """Read timeout of every Kubernetes API call (not watches): a call whose answer does not
    come in this long fails and is retried, so a half-open connection never blocks a worker."""
    api_qps: float = Field(default=200.0, gt=0, le=10000)
    """Requests per second the operator's API client sends on average (a token bucket;
    kopf's watches and the leader Lease are not counted). Protects the API server from a
    burst of reconciles; a call waits for a token rather than failing. A job costs about 20
    requests to start (7 children, its pods, status writes, events): at 100, 200 jobs x 8
    pods submitted at once took 40 s, all of it waiting for tokens; at 200, 23-26 s
    (bench/operator_scale.py). The API server's own priority and fairness is the guard
    against an overload; this is the operator's manners on a shared one."""
    api_burst: int = Field(default=400, ge=1, le=100000)
    """Requests the client may send at once above api_qps (the token bucket's size)."""
    api_list_page_size: int = Field(default=500, ge=1, le=100000)
    """Items per page of every list call (limit + continue): one huge response would hold
    the API server's and the operator's memory for all of it at once."""
    watch_inactivity_seconds: float = Field(default=70.0, gt=0, le=3600)
    """A watch that has seen no event (bookmarks included) this long is re-opened from where it
    was; the API server sends a bookmark about every minute on a healthy watch."""
    informers: bool = True
    """Read pods, ConfigMaps, nodes, ResourceQuotas and PriorityClasses from watch-backed
    caches (caches.py). False lists them from the API server on every reconcile and
    admission pass instead: more load, for a cluster where watches misbehave."""
    max_object_depth: int = Field(default=100, ge=10, le=5000)
    """Deepest nesting of maps and lists a job may have; a deeper job is failed with reason
    InvalidSpec instead of being planned (no real spec comes near; a hostile one could
    exhaust the operator's stack)."""
    test_kill_at: Literal["", "admission-written", "first-pod-created"] = ""
    """Tests only, never in production: SIGKILL the operator at this point of a reconcile
    (kill_points.py), to check that a restart recovers from a kill in a narrow window.
    Empty (the default; the chart never sets it) turns it off."""

    @field_validator(
        "namespaces",
        "allowed_capabilities",
        "allowed_priority_classes",
        "topology_levels",
        mode="before",
    )
    @classmethod
    def _split_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @model_validator(mode="after")
    def _grace_within_the_limit(self) -> OperatorSettings:
        if self.termination_grace_period_seconds > self.max_termination_grace_period_seconds:
            raise ValueError(
                f"termination_grace_period_seconds ({self.termination_grace_period_seconds}) "
                "is above max_termination_grace_period_seconds "
                f"({self.max_termination_grace_period_seconds}): the operator's own pods would "
                "break its guard rail"
            )
        return self

    def guard_rails(self) -> GuardRails:
        """The guard rails every job is held to (dtjob_api.guard_rails)."""
        return GuardRails(
            allow_host_path=self.allow_host_path,
            allow_host_namespaces=self.allow_host_namespaces,
            allow_privileged=self.allow_privileged,
            allowed_capabilities=tuple(self.allowed_capabilities),
            allowed_priority_classes=tuple(self.allowed_priority_classes),
            max_termination_grace_period_seconds=self.max_termination_grace_period_seconds,
        )
