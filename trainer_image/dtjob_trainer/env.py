"""The environment contract (docs/env-contract.md), read in this one module.

`read_env(environ)` is the only place the trainer reads `os.environ` (the launchers write
environments for their children but never read them). It returns a frozen `DistEnv`.

Rank order (the contract's, and `dtjob_trainer.layout`'s): processes are numbered role by
role in the order worker, stage, ps; inside a role by pod index; inside a pod by local rank.
`RANK` is the global rank of a pod's first process; `run` starts `LOCAL_WORLD_SIZE` processes
in a pod and gives each `LOCAL_RANK`, so a process's global rank is `RANK + LOCAL_RANK`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from dtjob_trainer.errors import ConfigError
from dtjob_trainer.fault import FaultPlan, read_fault_plan

# Where Kubernetes mounts the pod's service-account token, CA and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class DistEnv:
    """Every variable of the contract, typed. `rank` is this process's global rank."""

    master_addr: str
    master_port: int
    world_size: int
    pod_rank: int
    """RANK: global rank of the pod's local rank 0."""
    local_rank: int
    local_world_size: int
    nnodes: int
    node_rank: int
    job: str
    namespace: str
    role: str
    role_index: int
    strategy: str
    backend: str
    """nccl, gloo or auto (auto: nccl when CUDA is visible)."""
    config_path: str
    checkpoint_dir: str
    rendezvous_timeout: float
    progress_configmap: str | None
    history_configmap: str | None
    history_interval: float
    """DTJ_HISTORY_INTERVAL: least seconds between writes of the loss history (default 30)."""
    gang_generation: int
    ps_hosts: tuple[str, ...]
    worker_hosts: tuple[str, ...]
    pp_size: int | None
    dp_size: int | None
    tp_size: int | None
    """DTJ_TP_SIZE: tensor-parallel degree inside each pipeline stage (Pipeline, Hybrid)."""
    stage_index: int | None
    kubernetes_host: str | None
    kubernetes_port: str | None
    local_rank_set: bool
    """True when LOCAL_RANK was given, i.e. this process is one of a pod's spawned children."""
    heartbeat_seconds: float = 10.0
    """DTJ_HEARTBEAT_SECONDS: how often every rank publishes its heartbeat (default 10)."""
    stall_dump_seconds: float | None = None
    """DTJ_STALL_DUMP_SECONDS: a rank whose step stands still this long prints its stacks
    (the operator sets it from the job's progress deadline; unset: never)."""
    faults: FaultPlan | None = None
    """DTJ_FAULT_*: faults injected on purpose, for tests only (`dtjob_trainer.fault`)."""

    @property
    def rank(self) -> int:
        """Global rank of this process."""
        return self.pod_rank + self.local_rank

    @property
    def in_cluster(self) -> bool:
        """Running in a pod that can report progress to the API server."""
        return bool(self.kubernetes_host and self.progress_configmap)


def _get(environ: Mapping[str, str], name: str, default: str | None = None) -> str:
    value = environ.get(name, default)
    if value is None or value == "":
        raise ConfigError(
            f"environment variable {name}: required by the trainer (see env contract)"
        )
    return value


def _int(
    environ: Mapping[str, str], name: str, default: int | None = None, minimum: int = 0
) -> int:
    raw = _get(environ, name, None if default is None else str(default))
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"environment variable {name}: {value} is below {minimum}")
    return value


def _opt_int(environ: Mapping[str, str], name: str) -> int | None:
    return _int(environ, name) if environ.get(name) else None


def _seconds(environ: Mapping[str, str], name: str) -> float | None:
    raw = environ.get(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}: {raw!r} is not a number") from None
    if value <= 0:
        raise ConfigError(f"environment variable {name}: {value:g} must be above 0")
    return value


def _hosts(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(h for h in environ.get(name, "").split(",") if h)


def read_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Read and check the contract; raise ConfigError naming the variable when it is bad."""
    env = os.environ if environ is None else environ
    world_size = _int(env, "WORLD_SIZE", minimum=1)
    pod_rank = _int(env, "RANK")
    local_world_size = _int(env, "LOCAL_WORLD_SIZE", 1, minimum=1)
    local_rank = _int(env, "LOCAL_RANK", 0)
    if local_rank >= local_world_size:
        raise ConfigError(
            f"environment variable LOCAL_RANK: {local_rank} must be below "
            f"LOCAL_WORLD_SIZE {local_world_size}"
        )
    if pod_rank + local_world_size > world_size:
        raise ConfigError(
            f"environment variable RANK: {pod_rank} + LOCAL_WORLD_SIZE {local_world_size} "
            f"exceeds WORLD_SIZE {world_size}"
        )
    timeout = _get(env, "DTJ_RENDEZVOUS_TIMEOUT", "300")
    try:
        rendezvous_timeout = float(timeout)
    except ValueError:
        raise ConfigError(f"environment variable DTJ_RENDEZVOUS_TIMEOUT: {timeout!r}") from None
    history_interval = _get(env, "DTJ_HISTORY_INTERVAL", "30")
    try:
        interval = float(history_interval)
    except ValueError:
        raise ConfigError(
            f"environment variable DTJ_HISTORY_INTERVAL: {history_interval!r} is not a number"
        ) from None
    return DistEnv(
        master_addr=_get(env, "MASTER_ADDR"),
        master_port=_int(env, "MASTER_PORT", minimum=1),
        world_size=world_size,
        pod_rank=pod_rank,
        local_rank=local_rank,
        local_world_size=local_world_size,
        nnodes=_int(env, "NNODES", 1, minimum=1),
        node_rank=_int(env, "NODE_RANK", 0),
        job=env.get("DTJ_JOB", "local"),
        namespace=env.get("DTJ_NAMESPACE", "default"),
        role=env.get("DTJ_ROLE", "worker"),
        role_index=_int(env, "DTJ_ROLE_INDEX", 0),
        strategy=env.get("DTJ_STRATEGY", ""),
        backend=env.get("DTJ_BACKEND", "auto") or "auto",
        config_path=_get(env, "DTJ_CONFIG"),
        checkpoint_dir=_get(env, "DTJ_CHECKPOINT_DIR", "/checkpoints"),
        rendezvous_timeout=rendezvous_timeout,
        progress_configmap=env.get("DTJ_PROGRESS_CONFIGMAP") or None,
        history_configmap=env.get("DTJ_HISTORY_CONFIGMAP") or None,
        history_interval=interval,
        gang_generation=_int(env, "DTJ_GANG_GENERATION", 0),
        ps_hosts=_hosts(env, "DTJ_PS_HOSTS"),
        worker_hosts=_hosts(env, "DTJ_WORKER_HOSTS"),
        pp_size=_opt_int(env, "DTJ_PP_SIZE"),
        dp_size=_opt_int(env, "DTJ_DP_SIZE"),
        tp_size=_opt_int(env, "DTJ_TP_SIZE"),
        stage_index=_opt_int(env, "DTJ_STAGE_INDEX"),
        kubernetes_host=env.get("KUBERNETES_SERVICE_HOST") or None,
        kubernetes_port=env.get("KUBERNETES_SERVICE_PORT") or None,
        local_rank_set="LOCAL_RANK" in env,
        heartbeat_seconds=_seconds(env, "DTJ_HEARTBEAT_SECONDS") or 10.0,
        stall_dump_seconds=_seconds(env, "DTJ_STALL_DUMP_SECONDS"),
        faults=read_fault_plan(env),
    )
