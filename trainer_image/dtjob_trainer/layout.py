"""Pure rank layout: the pods a config asks for, in the contract's rank order, and the
environment each pod gets (docs/env-contract.md). `launch` uses it to run a job on one
machine exactly as the operator lays it out; tests check it against the documented order.

RANK(role, index, local) = offset(role) + index * procsPerPod(role) + local, with roles in
the order worker, stage, ps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dtjob_api.facts import STAGE_STRATEGIES
from dtjob_api.spec import StrategyType
from dtjob_trainer.config import TrainerConfig

ROLE_ORDER = ("worker", "stage", "ps")


@dataclass(frozen=True)
class PodSlot:
    """One pod of the job: its role, index, first global rank and process count."""

    role: str
    index: int
    rank: int
    procs: int
    node_rank: int

    def ranks(self) -> range:
        """Global ranks of the pod's processes."""
        return range(self.rank, self.rank + self.procs)


def role_offsets(cfg: TrainerConfig) -> dict[str, int]:
    """First global rank of each role (roles in contract order)."""
    offsets: dict[str, int] = {}
    total = 0
    for role in ROLE_ORDER:
        offsets[role] = total
        total += cfg.role_processes(role)
    return offsets


def plan_pods(cfg: TrainerConfig) -> list[PodSlot]:
    """Every pod of the job in rank order."""
    pods: list[PodSlot] = []
    rank = 0
    for role in ROLE_ORDER:
        spec = getattr(cfg.roles, role)
        if spec is None:
            continue
        for index in range(spec.replicas):
            pods.append(PodSlot(role, index, rank, spec.processes(), len(pods)))
            rank += spec.processes()
    return pods


def pod_dns_name(job: str, namespace: str, role: str, index: int) -> str:
    """Stable DNS name of a pod behind the job's headless Service."""
    return f"{job}-{role}-{index}.{job}.{namespace}.svc"


def pod_env(
    cfg: TrainerConfig,
    pod: PodSlot,
    *,
    job: str,
    namespace: str,
    config_path: str,
    checkpoint_dir: str,
    backend: str,
    host_of: Callable[[str, int], str] | None = None,
    progress_configmap: str | None = None,
    history_configmap: str | None = None,
    gang_generation: int = 0,
) -> dict[str, str]:
    """The contract's variables for one pod. `host_of(role, index)` names a pod's host
    (default: its cluster DNS name; the local launcher uses 127.0.0.1)."""
    pods = plan_pods(cfg)

    def host(role: str, index: int) -> str:
        return host_of(role, index) if host_of else pod_dns_name(job, namespace, role, index)

    master = host(pods[0].role, pods[0].index)
    env = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(cfg.network.masterPort),
        "WORLD_SIZE": str(cfg.world_size()),
        "RANK": str(pod.rank),
        "LOCAL_WORLD_SIZE": str(pod.procs),
        "NNODES": str(len(pods)),
        "NODE_RANK": str(pod.node_rank),
        "PET_NNODES": str(len(pods)),
        "PET_NODE_RANK": str(pod.node_rank),
        "PET_NPROC_PER_NODE": str(pod.procs),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(cfg.network.masterPort),
        "DTJ_JOB": job,
        "DTJ_NAMESPACE": namespace,
        "DTJ_ROLE": pod.role,
        "DTJ_ROLE_INDEX": str(pod.index),
        "DTJ_STRATEGY": str(cfg.strategy.type),
        "DTJ_BACKEND": backend,
        "DTJ_CONFIG": config_path,
        "DTJ_CHECKPOINT_DIR": checkpoint_dir,
        "DTJ_RENDEZVOUS_TIMEOUT": str(cfg.network.rendezvousTimeoutSeconds),
        "DTJ_GANG_GENERATION": str(gang_generation),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "NCCL_DEBUG": str(cfg.network.ncclDebug or "WARN"),
    }
    if cfg.network.ncclSocketIfname:
        # Only when asked: the cluster's default interface (eth0) may not exist locally.
        env["NCCL_SOCKET_IFNAME"] = str(cfg.network.ncclSocketIfname)
    if progress_configmap:
        env["DTJ_PROGRESS_CONFIGMAP"] = progress_configmap
    if history_configmap:
        env["DTJ_HISTORY_CONFIGMAP"] = history_configmap
    if cfg.strategy.type == StrategyType.PARAMETER_SERVER:
        env["DTJ_PS_HOSTS"] = ",".join(host(p.role, p.index) for p in pods if p.role == "ps")
        env["DTJ_WORKER_HOSTS"] = ",".join(
            host(p.role, p.index) for p in pods if p.role == "worker"
        )
    if cfg.strategy.type in STAGE_STRATEGIES:
        dp, tp = cfg.data_parallel_size(), cfg.stage_tensor_parallel_size()
        env["DTJ_PP_SIZE"] = str(cfg.pipeline_size())
        env["DTJ_DP_SIZE"] = str(dp)
        env["DTJ_TP_SIZE"] = str(tp)
        first = (pod.rank - role_offsets(cfg)["stage"]) // (dp * tp)
        env["DTJ_STAGE_INDEX"] = str(first) if pod.role == "stage" else "0"
    return env
