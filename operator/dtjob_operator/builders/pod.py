"""One trainer pod of a gang: the role's pod template with the operator's contract merged in
(identity, env contract, resources, volumes, security defaults)."""

from __future__ import annotations

from typing import Any

from dtjob_api import podtemplate as pt
from dtjob_api.spec import RoleSpec, StageRoleSpec
from dtjob_operator.admission.resources import CPU, parse_quantity
from dtjob_operator.builders.job import Job, Manifest, child_metadata
from dtjob_operator.builders.quantity import format_bytes, parse_bytes
from dtjob_operator.constants import (
    ANNOTATION_RANK,
    ANNOTATION_WORLD_SIZE,
    CHECKPOINT_VOLUME,
    CONFIG_KEY,
    CONFIG_MOUNT_DIR,
    CONFIG_VOLUME,
    DEFAULT_TRAINER_COMMAND,
    LABEL_GENERATION,
    LABEL_ROLE,
    LABEL_ROLE_INDEX,
    RENDEZVOUS_PORT_NAME,
    SHM_MOUNT_PATH,
    SHM_VOLUME,
    TRAINER_CONTAINER,
)
from dtjob_operator.envcontract import build_env
from dtjob_operator.naming import config_map_name, pod_name, service_account_name, service_name
from dtjob_operator.settings import OperatorSettings

MIN_SHM_BYTES = 2**30  # below 1Gi, NCCL and DataLoader workers run out of shared memory
RUN_AS_ID = 1000


def pod_labels(role: str, index: int, generation: int) -> dict[str, str]:
    """The dtjob.io labels that place a pod in its job, role and gang generation."""
    return {LABEL_ROLE: role, LABEL_ROLE_INDEX: str(index), LABEL_GENERATION: str(generation)}


def shm_size(job: Job, role: RoleSpec, settings: OperatorSettings) -> str:
    """spec.network.shmSize, else the settings' size per GPU, at least 1Gi."""
    if job.spec.network.shmSize:
        return job.spec.network.shmSize
    per_gpu = parse_bytes(settings.default_shm_per_gpu)
    return format_bytes(max(MIN_SHM_BYTES, role.gpus * per_gpu))


def pod_role(job: Job, role: str, index: int) -> RoleSpec:
    """The role as pod `index` gets it: a stage group's gpus, cpu and memory override the
    stage role's (heterogeneous pipelines, roles.stage.groups)."""
    role_spec: RoleSpec = getattr(job.spec.roles, role)
    if isinstance(role_spec, StageRoleSpec):
        return role_spec.pod_role(index)
    return role_spec


def resources(role: RoleSpec) -> dict[str, dict[str, str]]:
    """requests = limits (Guaranteed QoS when cpu and memory are set: a training pod should
    be the last one the kubelet evicts; extended resources cannot be overcommitted anyway);
    GPUs, as role.gpuResource, only when the role has any; then role.extendedResources."""
    amounts: dict[str, str] = {}
    if role.cpu:
        amounts["cpu"] = role.cpu
    if role.memory:
        amounts["memory"] = role.memory
    if role.gpus > 0:
        amounts[role.gpuResource] = str(role.gpus)
    for name, amount in sorted((role.extendedResources or {}).items()):
        amounts[name] = amount
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def trainer_env(
    job: Job,
    role: str,
    index: int,
    generation: int,
    user_env: list[dict[str, Any]],
    settings: OperatorSettings,
) -> list[dict[str, Any]]:
    """Contract variables, then the user's. Validation refuses a user variable named like a
    contract one (a wrong RANK hangs the whole gang); should one get here all the same, it
    is dropped rather than let it win (the last of two equal names wins in a container).
    User variables come last so they may refer to contract ones with $(VAR)."""
    contract = build_env(
        job.name,
        job.namespace,
        job.spec,
        role,
        index,
        generation,
        default_socket_ifname=settings.default_nccl_socket_ifname,
        layout=job.layout,
    )
    names = {var["name"] for var in contract}
    user = [var for var in user_env if var.get("name") not in names]
    procs = int(next(v["value"] for v in contract if v["name"] == "LOCAL_WORLD_SIZE"))
    threads = omp_threads(pod_role(job, role, index).cpu, procs)
    if threads is None or any(var.get("name") == OMP_NUM_THREADS for var in user):
        return [*contract, *user]
    return [*contract, {"name": OMP_NUM_THREADS, "value": str(threads)}, *user]


OMP_NUM_THREADS = "OMP_NUM_THREADS"


def omp_threads(cpu: str | None, procs: int) -> int | None:
    """OMP_NUM_THREADS for each of a pod's `procs` processes, unless the user sets it: the
    role's CPU shared between them (whole cores, at least one); without a CPU amount, 1 for
    several processes (torchrun's default) and nothing for one.

    torch otherwise starts one intra-op thread per core of the node, not of the pod: a
    500m pod on a 2-core machine ran two spinning OpenMP threads against its CPU quota and
    spent 118 CPU-seconds on a CPUOffload example that takes 14 with one thread (same
    result, 7x the wall time); on a 96-core node it would be 96 threads in half a core."""
    if cpu is None:
        return 1 if procs > 1 else None
    return max(1, parse_quantity(cpu, CPU) // 1000 // max(1, procs))


def operator_volumes(job: Job, role: RoleSpec, settings: OperatorSettings) -> list[dict[str, Any]]:
    """The job config, a memory-backed /dev/shm and the checkpoint volume."""
    checkpoint = job.spec.checkpoint
    checkpoint_source: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": checkpoint.claimName}}
        if checkpoint.claimName
        else {"emptyDir": {}}
    )
    return [
        {
            "name": CONFIG_VOLUME,
            "configMap": {
                "name": config_map_name(job.name),
                "items": [{"key": CONFIG_KEY, "path": CONFIG_KEY}],
            },
        },
        {
            "name": SHM_VOLUME,
            "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(job, role, settings)},
        },
        {"name": CHECKPOINT_VOLUME, **checkpoint_source},
    ]


def operator_mounts(job: Job) -> list[dict[str, Any]]:
    """Where the trainer container sees the operator's volumes."""
    return [
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_DIR, "readOnly": True},
        {"name": SHM_VOLUME, "mountPath": SHM_MOUNT_PATH},
        {"name": CHECKPOINT_VOLUME, "mountPath": job.spec.checkpoint.mountPath},
    ]


def pod_security_context() -> dict[str, Any]:
    """The pod half of the 'restricted' Pod Security Standard; fsGroup makes the checkpoint
    volume writable by the non-root trainer."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_ID,
        "runAsGroup": RUN_AS_ID,
        "fsGroup": RUN_AS_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(user: Any = None) -> dict[str, Any]:
    """The container half of the 'restricted' Pod Security Standard, for the fields the
    user's container context leaves unset. A privileged container (the guard rails allowed
    it) escalates by definition: Kubernetes refuses privileged with
    allowPrivilegeEscalation false, so that default is left out."""
    defaults: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if isinstance(user, dict) and user.get("privileged") is True:
        del defaults["allowPrivilegeEscalation"]
    return _with_defaults(defaults, user)


def _with_defaults(defaults: dict[str, Any], user: Any) -> dict[str, Any]:
    """The user's fields over ours: a default applies only where the user set nothing."""
    return {**defaults, **(user if isinstance(user, dict) else {})}


def trainer_container(
    job: Job,
    role: str,
    index: int,
    generation: int,
    user: dict[str, Any],
    settings: OperatorSettings,
) -> dict[str, Any]:
    """The user's `trainer` container (or none) with the contract merged in.

    image and command: the user's container's when set, else spec.trainer's, else the
    bundled trainer. Env, the rendezvous port, mounts and resources: the contract's first
    (validation refuses user settings that contradict it), then the user's. Everything
    else the user set (probes, envFrom, workingDir, lifecycle, ...) is kept."""
    spec = job.spec
    trainer = spec.trainer
    role_spec = pod_role(job, role, index)
    container = dict(user)
    container["name"] = TRAINER_CONTAINER
    container["image"] = user.get("image") or trainer.image or settings.trainer_image
    if "command" not in user:
        container["command"] = list(trainer.command or DEFAULT_TRAINER_COMMAND)
        if "args" not in user and trainer.args:
            container["args"] = list(trainer.args)
    if "imagePullPolicy" not in user and trainer.imagePullPolicy:
        container["imagePullPolicy"] = trainer.imagePullPolicy
    container["env"] = trainer_env(job, role, index, generation, user.get("env") or [], settings)
    rendezvous = {"name": RENDEZVOUS_PORT_NAME, "containerPort": spec.network.masterPort}
    container["ports"] = [rendezvous, *(user.get("ports") or [])]
    container["volumeMounts"] = [*operator_mounts(job), *(user.get("volumeMounts") or [])]
    # The last log lines become the termination message, so a failed pod's error shows
    # up in the job's Failed condition without anyone running kubectl logs.
    container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    container.pop("resources", None)  # the role's (validation refuses the user's)
    if res := resources(role_spec):
        container["resources"] = res
    if settings.pod_security_defaults:
        container["securityContext"] = container_security_context(user.get("securityContext"))
    return container


def build_pod(
    job: Job, role: str, index: int, generation: int, settings: OperatorSettings
) -> Manifest:
    """The trainer pod `<job>-<role>-<index>` of gang `generation`: the role's pod template
    with the operator's contract merged in (docs/api.md, "The pod template").

    restartPolicy Never: NCCL cannot lose a member, so the operator restarts the whole gang
    rather than letting the kubelet restart one container into a dead collective."""
    spec = job.spec
    role_spec: RoleSpec | None = getattr(spec.roles, role)
    if role_spec is None:
        raise KeyError(f"job {job.name} has no role {role!r}")
    template = role_spec.template
    layout = job.layout
    slot = layout.slot(role, index)
    name = pod_name(job.name, role, index)

    metadata = child_metadata(job, name)
    metadata["labels"] = {
        **pt.merged(pt.label_maps(template)),
        **metadata["labels"],
        **pod_labels(role, index, generation),
    }
    metadata["annotations"] = {
        **pt.merged(pt.annotation_maps(template)),
        ANNOTATION_RANK: str(slot.base_rank),
        ANNOTATION_WORLD_SIZE: str(layout.world_size),
    }

    pod_spec = pt.folded_pod_spec(template)
    containers = list(pod_spec.get("containers") or [])
    position = pt.trainer_index(pod_spec)
    user_trainer = containers[position] if position is not None else {}
    merged_trainer = trainer_container(job, role, index, generation, user_trainer, settings)
    if position is None:
        containers.insert(0, merged_trainer)  # first: the container `kubectl logs` shows
    else:
        containers[position] = merged_trainer
    pod_spec.update(
        hostname=name,
        subdomain=service_name(job.name),
        restartPolicy="Never",
        containers=containers,
        volumes=[
            *operator_volumes(job, pod_role(job, role, index), settings),
            *(pod_spec.get("volumes") or []),
        ],
    )
    # The per-job account may patch the job's progress; a user's account is bound to the
    # same Role (builders/rbac.py).
    pod_spec.setdefault("serviceAccountName", service_account_name(job.name))
    pod_spec.setdefault("terminationGracePeriodSeconds", settings.termination_grace_period_seconds)
    # Service links would inject e.g. MASTER_PORT=tcp://... for a Service named "master"
    # in the namespace; the contract alone defines the environment.
    pod_spec.setdefault("enableServiceLinks", False)
    if settings.pod_security_defaults:
        pod_spec["securityContext"] = _with_defaults(
            pod_security_context(), pod_spec.get("securityContext")
        )
    priority = pod_spec.get("priorityClassName") or spec.priorityClassName
    if priority:
        pod_spec["priorityClassName"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
