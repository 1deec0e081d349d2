"""The operator side of the environment contract (docs/env-contract.md).

Rank order, the one place it is decided: processes are numbered role by role in the order
worker, stage, ps; inside a role by pod index; inside a pod by local rank:

    RANK(role, index, local) = offset(role) + index * procsPerPod(role) + local
    offset(worker) = 0
    offset(stage)  = processes(worker)
    offset(ps)     = processes(worker) + processes(stage)

So rank 0 is worker-0 (stage-0 for the pipeline strategies, which have no workers) and the
parameter servers take the highest ranks. NODE_RANK numbers the pods in the same order.
For Hybrid the stage processes form a (pp, dp) DeviceMesh in row-major order, so the stage
of a rank is (rank - offset(stage)) // dp.

Every variable is a string, every pod of a gang agrees on the shared ones (world size,
master, backend), and nothing depends on the order pods are created in.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtjob_api.aliases import resolved_mode
from dtjob_api.spec import (
    BackendType,
    DistributedTrainingJobSpec,
    PSMode,
    RoleSpec,
    RunPolicy,
    StallPolicy,
    StrategyType,
)
from dtjob_operator.constants import CONFIG_PATH, ROLE_ORDER, TERMINATION_MESSAGE_PATH
from dtjob_operator.naming import (
    history_config_map_name,
    pod_dns_name,
    progress_config_map_name,
)
from dtjob_operator.policies.stall import FLOOR_SECONDS

PIPELINE_STRATEGIES = frozenset(
    {StrategyType.MODEL_PARALLEL, StrategyType.PIPELINE, StrategyType.HYBRID}
)
DEFAULT_HYBRID_DATA_PARALLEL = 2  # HybridSpec's default when spec.strategy.hybrid is unset
DEFAULT_NCCL_SOCKET_IFNAME = "eth0"


@dataclass(frozen=True)
class PodSlot:
    """One pod's place in the process grid."""

    role: str
    index: int
    base_rank: int
    """Global rank of the pod's local rank 0."""
    procs: int
    """Processes in the pod (LOCAL_WORLD_SIZE)."""
    node_rank: int
    """The pod's position over all pods, in rank order."""


@dataclass(frozen=True)
class RankLayout:
    """The whole job's process grid, in rank order."""

    slots: tuple[PodSlot, ...]
    world_size: int

    @property
    def nnodes(self) -> int:
        """Pods in the job."""
        return len(self.slots)

    @property
    def master(self) -> PodSlot:
        """The pod holding rank 0 (the rendezvous store and progress reporter)."""
        return self.slots[0]

    def slot(self, role: str, index: int) -> PodSlot:
        """The slot of one pod; KeyError if the job has no such pod."""
        for s in self.slots:
            if s.role == role and s.index == index:
                return s
        raise KeyError(f"no pod {role}-{index} in this job")

    def role_slots(self, role: str) -> tuple[PodSlot, ...]:
        """The slots of one role, by index."""
        return tuple(s for s in self.slots if s.role == role)


def job_roles(spec: DistributedTrainingJobSpec) -> list[tuple[str, RoleSpec]]:
    """The roles the job has, in rank order."""
    present = []
    for name in ROLE_ORDER:
        role = getattr(spec.roles, name)
        if role is not None:
            present.append((name, role))
    return present


def rank_layout(spec: DistributedTrainingJobSpec) -> RankLayout:
    """Base rank, process count and node rank of every pod (see the module docstring)."""
    slots: list[PodSlot] = []
    rank = 0
    for name, role in job_roles(spec):
        procs = role.processes()
        for index in range(role.replicas):
            slots.append(PodSlot(name, index, rank, procs, len(slots)))
            rank += procs
    return RankLayout(tuple(slots), rank)


def resolve_backend(spec: DistributedTrainingJobSpec) -> str:
    """nccl or gloo. `auto` looks at the job's largest GPU count, not the pod's own, so that
    every rank of a gang picks the same backend. Parameter servers talk c10d point-to-point
    between GPU workers and CPU servers, which only gloo supports, so auto is gloo there
    (their GPU workers still compute on the GPU) unless the mode only runs collectives and
    every role has GPUs (`collective_parameter_servers`); a pipeline with CPU stage groups
    (roles.stage.groups) is gloo too, for its CPU-GPU sends."""
    backend = BackendType(spec.strategy.backend)
    if backend != BackendType.AUTO:
        return backend.value
    if spec.strategy.type == StrategyType.PARAMETER_SERVER:
        nccl = collective_parameter_servers(spec)
        return (BackendType.NCCL if nccl else BackendType.GLOO).value
    groups = (spec.roles.stage.groups if spec.roles.stage else None) or []
    if any(g.gpus == 0 for g in groups):
        # A heterogeneous pipeline's CPU stages exchange activations with GPU ones, and
        # NCCL cannot talk to a CPU rank.
        return BackendType.GLOO.value
    max_gpus = max((role.gpus for _, role in job_roles(spec)), default=0)
    max_gpus = max([max_gpus, *(g.gpus for g in groups)])
    return (BackendType.NCCL if max_gpus > 0 else BackendType.GLOO).value


def collective_parameter_servers(spec: DistributedTrainingJobSpec) -> bool:
    """True for a ParameterServer job that NCCL can carry: mode Sync (all-reduce, or reduce
    and broadcast with ps ranks) or synchronous EASGD (no ps role: an all-reduce), with GPUs
    in every role, so every rank has a GPU of its own. The other modes receive from any
    source, which NCCL cannot."""
    mode = resolved_mode(spec.strategy)
    collective = mode == PSMode.SYNC or (mode == PSMode.EASGD and spec.roles.ps is None)
    return collective and all(role.gpus > 0 for _, role in job_roles(spec))


def data_parallel_degree(spec: DistributedTrainingJobSpec) -> int:
    """DTJ_DP_SIZE of the pipeline strategies: the Hybrid setting, else 1."""
    if spec.strategy.type != StrategyType.HYBRID:
        return 1
    hybrid = spec.strategy.hybrid
    return hybrid.dataParallel if hybrid is not None else DEFAULT_HYBRID_DATA_PARALLEL


def stage_tensor_parallel_degree(spec: DistributedTrainingJobSpec) -> int:
    """DTJ_TP_SIZE of the pipeline strategies: strategy.tensorParallel.size when it is set
    (Pipeline and Hybrid: 3-D parallelism), else 1."""
    tp = spec.strategy.tensorParallel
    return tp.size if tp is not None else 1


# How often each rank publishes its heartbeat (the trainer's default, said explicitly), at
# most: a shorter progress deadline gets faster beats (heartbeat_seconds).
HEARTBEAT_SECONDS = 10


def heartbeat_seconds(policy: RunPolicy) -> int:
    """DTJ_HEARTBEAT_SECONDS: HEARTBEAT_SECONDS, or a sixth of an explicit progress deadline
    when that is less (at least 1 s). Rank 0 calls a rank stopped after two silent beats and
    the summary reaches the operator on the next report: at 10 s beats a 10 s deadline
    would be declared before the summary named the rank that stopped first."""
    deadline = policy.progressDeadlineSeconds
    if deadline is None:
        return HEARTBEAT_SECONDS
    return max(1, min(HEARTBEAT_SECONDS, deadline // 6))


def stall_dump_seconds(policy: RunPolicy) -> int | None:
    """DTJ_STALL_DUMP_SECONDS: each rank prints its stacks once its own step has stood still
    this long. Three quarters of the progress deadline (the explicit one, else the learned
    deadline's floor), so that the stacks are in the pods' logs by the time the operator
    declares the gang stalled; None when stall detection is off."""
    if policy.stallPolicy == StallPolicy.OFF:
        return None
    deadline = policy.progressDeadlineSeconds or FLOOR_SECONDS
    return max(1, deadline * 3 // 4)


def build_env(
    job_name: str,
    namespace: str,
    spec: DistributedTrainingJobSpec,
    role: str,
    index: int,
    generation: int,
    *,
    default_socket_ifname: str = DEFAULT_NCCL_SOCKET_IFNAME,
    layout: RankLayout | None = None,
) -> list[dict[str, str]]:
    """Every contract variable for one pod, as core/v1 EnvVar dicts in a stable order.

    `default_socket_ifname` is NCCL_SOCKET_IFNAME when the spec names none (an operator
    setting: the interface of the cluster's pod network); `layout` is rank_layout(spec)
    when the caller has it (builders.Job.layout)."""
    layout = layout or rank_layout(spec)
    me = layout.slot(role, index)
    master = layout.master
    master_addr = pod_dns_name(job_name, namespace, master.role, master.index)
    master_port = str(spec.network.masterPort)
    env: dict[str, str] = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
        "WORLD_SIZE": str(layout.world_size),
        "RANK": str(me.base_rank),
        "LOCAL_WORLD_SIZE": str(me.procs),
        "NNODES": str(layout.nnodes),
        "NODE_RANK": str(me.node_rank),
        "PET_NNODES": str(layout.nnodes),
        "PET_NODE_RANK": str(me.node_rank),
        "PET_NPROC_PER_NODE": str(me.procs),
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": master_port,
        "DTJ_JOB": job_name,
        "DTJ_NAMESPACE": namespace,
        "DTJ_ROLE": role,
        "DTJ_ROLE_INDEX": str(index),
        "DTJ_STRATEGY": str(spec.strategy.type),
        "DTJ_BACKEND": resolve_backend(spec),
        "DTJ_CONFIG": CONFIG_PATH,
        "DTJ_CHECKPOINT_DIR": spec.checkpoint.mountPath,
        "DTJ_RENDEZVOUS_TIMEOUT": str(spec.network.rendezvousTimeoutSeconds),
        "DTJ_PROGRESS_CONFIGMAP": progress_config_map_name(job_name),
        "DTJ_HISTORY_CONFIGMAP": history_config_map_name(job_name),
        "DTJ_GANG_GENERATION": str(generation),
    }
    strategy = StrategyType(spec.strategy.type)
    if strategy == StrategyType.PARAMETER_SERVER:
        env["DTJ_PS_HOSTS"] = _hosts(job_name, namespace, layout, "ps")
        env["DTJ_WORKER_HOSTS"] = _hosts(job_name, namespace, layout, "worker")
    if strategy in PIPELINE_STRATEGIES:
        stages = layout.role_slots("stage")
        stage_procs = sum(s.procs for s in stages)
        offset = stages[0].base_rank if stages else 0
        dp, tp = data_parallel_degree(spec), stage_tensor_parallel_degree(spec)
        # Stage ranks in (pp, dp, tp) row-major order: a stage spans dp x tp ranks.
        width = dp * tp
        env["DTJ_PP_SIZE"] = str(stage_procs // width)
        env["DTJ_DP_SIZE"] = str(dp)
        env["DTJ_TP_SIZE"] = str(tp)
        # The stage of the pod's first process; a pod whose processes span stages (procs
        # not a multiple of dp x tp) has each process compute its own as rank // (dp x tp).
        first = (me.base_rank - offset) // width
        env["DTJ_STAGE_INDEX"] = str(first) if role == "stage" else "0"
    env["DTJ_HEARTBEAT_SECONDS"] = str(heartbeat_seconds(spec.runPolicy))
    if (dump := stall_dump_seconds(spec.runPolicy)) is not None:
        env["DTJ_STALL_DUMP_SECONDS"] = str(dump)
    env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
    env["NCCL_DEBUG"] = spec.network.ncclDebug
    env["NCCL_SOCKET_IFNAME"] = spec.network.ncclSocketIfname or default_socket_ifname
    # torchrun (and dtjob-run) write the failing child's error there, and the kubelet puts it
    # in the pod status, where the failure policy reads the child's exit code.
    env["TORCHELASTIC_ERROR_FILE"] = TERMINATION_MESSAGE_PATH
    return [{"name": name, "value": value} for name, value in env.items()]


def _hosts(job_name: str, namespace: str, layout: RankLayout, role: str) -> str:
    return ",".join(
        pod_dns_name(job_name, namespace, s.role, s.index) for s in layout.role_slots(role)
    )
