"""`launch`: run a job on one machine without Kubernetes, laid out exactly as the operator
lays it out (`dtjob_trainer.layout`): one `run` process per pod with the pod's contract
variables (MASTER_ADDR 127.0.0.1), which starts the pod's local ranks itself.

The config may be a DistributedTrainingJob manifest (YAML or JSON; its .spec is used) or a
bare spec. `--checkpoint-dir` replaces checkpoint.mountPath (default
./dtjob-checkpoints/<job>), the rendezvous port is a free local one unless --port is given,
and `--nproc N` resizes the main role (worker, or stage for the pipeline strategies) so the
job has N processes in all, keeping the other roles (ps) as configured.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import sys
from collections.abc import Callable, Mapping
from inspect import getfile
from pathlib import Path
from typing import Any

import dtjob_api
import dtjob_trainer
from dtjob_api.facts import STAGE_STRATEGIES
from dtjob_api.spec import StrategyType
from dtjob_trainer.config import TrainerConfig, config_to_spec, load_config
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.layout import plan_pods, pod_env
from dtjob_trainer.procs import popen, supervise, trainer_command

# Variables of the contract (and Kubernetes') never inherited from the launching shell.
_CONTRACT_PREFIXES = ("DTJ_", "PET_", "KUBERNETES_")
_CONTRACT_NAMES = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NNODES",
    "NODE_RANK",
}
# ... except the knobs a local run may turn like the operator does in a pod: how often ranks
# publish heartbeats, when a still rank prints its stacks, and the test-only fault hooks.
_PASSED_ON = ("DTJ_HEARTBEAT_SECONDS", "DTJ_STALL_DUMP_SECONDS", "DTJ_FAULT_")


def read_job_file(path: str) -> tuple[str, dict[str, Any]]:
    """(job name, spec) from a manifest or a bare spec in YAML or JSON."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"{path}: not JSON, and PyYAML is not installed") from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a DistributedTrainingJob or its spec (an object)")
    if "spec" in doc:
        name = str((doc.get("metadata") or {}).get("name") or Path(path).stem)
        spec = doc["spec"]
        if not isinstance(spec, dict):
            raise ConfigError(f"{path}: spec: must be an object")
        return name, spec
    return Path(path).stem, doc


def resize(spec: dict[str, Any], nproc: int) -> dict[str, Any]:
    """The spec with its main role resized so the job has `nproc` processes."""
    cfg = load_config(spec)
    main = "stage" if cfg.strategy.type in STAGE_STRATEGIES else "worker"
    others = cfg.world_size() - cfg.role_processes(main)
    left = nproc - others
    if left < 1:
        raise ConfigError(
            f"--nproc: {nproc} leaves no process for roles.{main} ({others} in other roles)"
        )
    out: dict[str, Any] = json.loads(json.dumps(spec))
    role = out["roles"][main]
    per_pod = getattr(cfg.roles, main).processes()
    if left % per_pod == 0:
        role["replicas"] = left // per_pod
    else:
        role["replicas"], role["procsPerPod"] = left, 1
    return out


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_local_backend(cfg: TrainerConfig, warn: Callable[[str], None] | None = None) -> str:
    """auto -> nccl only when every process can have its own GPU (NCCL refuses sharing).
    A job that asks for GPUs and is sent to gloo is told so loudly on stderr: a silent
    fallback to the CPU would look like a very slow GPU job."""
    if cfg.strategy.backend != "auto":
        return cfg.strategy.backend
    stage = cfg.roles.stage
    if stage is not None and any(g.gpus == 0 for g in stage.groups or []):
        return "gloo"  # CPU stage groups: NCCL cannot reach them (as the operator decides)
    devices, world = cuda_device_count(), cfg.world_size()
    if devices >= world:
        return "nccl"
    if wanted := requested_gpus(cfg):
        from dtjob_trainer.cuda_diag import diagnose_no_cuda

        ps = cfg.strategy.type == StrategyType.PARAMETER_SERVER
        hint = diagnose_no_cuda() if devices == 0 else ""
        (warn or _stderr)(local_fallback_warning(ps, wanted, devices, world, hint))
    return "gloo"


def local_fallback_warning(ps: bool, wanted: int, devices: int, world: int, hint: str = "") -> str:
    """The launcher's one line when a job that asks for `wanted` GPUs runs over gloo because
    the machine has `devices` for `world` processes. Parameter-server ranks still compute on
    the GPUs (sharing them); the other strategies train on the CPU."""
    if devices == 0:
        return (
            f"WARNING: the job asks for {wanted} GPU(s) but no CUDA device is visible: "
            f"training on the CPU with gloo. {hint}"
        ).rstrip()
    if ps:
        return (
            f"WARNING: the job asks for {wanted} GPU(s) and this machine has {devices} for "
            f"{world} processes: NCCL needs one GPU per process, so the job runs over gloo "
            f"and its GPU ranks share the {devices} GPU(s)."
        )
    return (
        f"WARNING: the job asks for {wanted} GPU(s) but this machine has {devices} visible for "
        f"{world} processes: training on the CPU with gloo. Use --nproc {devices} (one "
        "process per GPU) to train on the GPUs."
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def requested_gpus(cfg: TrainerConfig) -> int:
    """GPUs the job's roles ask for in all."""
    roles = (cfg.roles.worker, cfg.roles.ps, cfg.roles.stage)
    return sum(r.replicas * r.gpus for r in roles if r is not None)


def gpu_slices(procs_per_pod: list[int], visible: list[str]) -> list[str]:
    """CUDA_VISIBLE_DEVICES of each local pod, as a node's device plugin would give them:
    consecutive GPUs of `visible` in rank order, so that pods do not all take GPU 0 (NCCL
    refuses two ranks on one GPU). With fewer GPUs than processes (gloo: parameter-server
    ranks share them) the order wraps around. Empty without GPUs."""
    if not visible:
        return []
    slices, used = [], 0
    for procs in procs_per_pod:
        ids = dict.fromkeys(visible[(used + i) % len(visible)] for i in range(procs))
        slices.append(",".join(ids))
        used += procs
    return slices


# Device nodes without one of which no torch build sees a GPU: NVIDIA's, ROCm's (a ROCm
# torch counts AMD GPUs through torch.cuda) and WSL's.
GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def cuda_device_count(device_nodes: tuple[str, ...] = GPU_DEVICE_NODES) -> int:
    """torch.cuda.device_count(); 0 without importing torch on a machine with no GPU device
    node. The launcher itself runs no torch code, and importing torch only to count no GPUs
    cost every CPU launch about 3 s before its first process started."""
    if not any(glob.glob(pattern) for pattern in device_nodes):
        return 0
    import torch

    return torch.cuda.device_count()


def visible_gpus(environ: Mapping[str, str]) -> list[str]:
    """The GPUs this machine lets the launch use, as CUDA_VISIBLE_DEVICES entries."""
    count = cuda_device_count()
    given = [g.strip() for g in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return given[:count] if given else [str(i) for i in range(count)]


def child_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The launching shell's environment minus contract variables (but `_PASSED_ON`), plus
    the paths this process imports the trainer and the API package from (a checkout's
    trainer_image/ and api/, or site-packages), so the children run the same code whatever
    their directory."""
    env = {
        k: v
        for k, v in environ.items()
        if k.startswith(_PASSED_ON)
        or (k not in _CONTRACT_NAMES and not k.startswith(_CONTRACT_PREFIXES))
    }
    roots = [str(Path(getfile(pkg)).resolve().parent.parent) for pkg in (dtjob_trainer, dtjob_api)]
    roots = list(dict.fromkeys(roots))
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in roots]
    env["PYTHONPATH"] = os.pathsep.join([*roots, *paths])
    return env


def launch(
    config_path: str,
    nproc: int | None,
    checkpoint_dir: str | None,
    port: int | None,
    run_args: list[str],
    environ: Mapping[str, str],
) -> int:
    """Validate, lay out and run the job; return the gang's exit code."""
    job, spec = read_job_file(config_path)
    if nproc is not None:
        spec = resize(spec, nproc)
    ckpt = Path(checkpoint_dir or Path("dtjob-checkpoints") / job).resolve()
    spec = {
        **spec,
        "checkpoint": {**spec.get("checkpoint", {}), "mountPath": str(ckpt)},
        "network": {**spec.get("network", {}), "masterPort": port or free_port()},
    }
    cfg = load_config(spec)
    ckpt.mkdir(parents=True, exist_ok=True)
    config_file = ckpt / "job-config.json"
    config_file.write_text(json.dumps(config_to_spec(cfg), indent=2))
    backend = resolve_local_backend(cfg)
    base = child_base_env(environ)
    children = []
    pods = plan_pods(cfg)
    slices = gpu_slices([pod.procs for pod in pods], visible_gpus(environ))
    for i, pod in enumerate(pods):
        env = pod_env(
            cfg,
            pod,
            job=job,
            namespace="local",
            config_path=str(config_file),
            checkpoint_dir=str(ckpt),
            backend=backend,
            host_of=lambda role, index: "127.0.0.1",
        )
        if slices:
            env["CUDA_VISIBLE_DEVICES"] = slices[i]
        children.append((trainer_command("run", *run_args), {**base, **env}))
    return supervise(children, start=starter(cfg, environ))


def starter(cfg: TrainerConfig, environ: Mapping[str, str]) -> Callable[..., Any]:
    """How the pods' processes start: forked from a server that imported torch and the
    job's strategy once (`dtjob_trainer.forked`) on a machine without GPU device nodes,
    unless DTJOB_LAUNCH_FORK=0; new interpreters otherwise."""
    if environ.get("DTJOB_LAUNCH_FORK", "1") == "0" or any(
        glob.glob(pattern) for pattern in GPU_DEVICE_NODES
    ):
        return popen
    from dtjob_trainer.forked import forked_starter
    from dtjob_trainer.strategies import MODULES, strategy_key

    return forked_starter([f"dtjob_trainer.strategies.{MODULES[strategy_key(cfg)]}"])
