"""One trainer pod of a gang: identity, env contract, resources, volumes, security, overlay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtjob_operator.api.spec import PodTemplateOverlay, RoleSpec
from dtjob_operator.builders.job import Job, Manifest, child_metadata
from dtjob_operator.builders.quantity import format_bytes, parse_bytes
from dtjob_operator.constants import (
    ANNOTATION_RANK,
    ANNOTATION_WORLD_SIZE,
    CONFIG_KEY,
    CONFIG_MOUNT_DIR,
    DEFAULT_TRAINER_COMMAND,
    LABEL_GENERATION,
    LABEL_ROLE,
    LABEL_ROLE_INDEX,
    RENDEZVOUS_PORT_NAME,
    RESERVED_PREFIX,
    SHM_MOUNT_PATH,
    TRAINER_CONTAINER,
)
from dtjob_operator.envcontract import build_env, rank_layout
from dtjob_operator.naming import config_map_name, pod_name, service_account_name, service_name
from dtjob_operator.settings import OperatorSettings

MIN_SHM_BYTES = 2**30  # below 1Gi, NCCL and DataLoader workers run out of shared memory
CONFIG_VOLUME = "config"
SHM_VOLUME = "dshm"
CHECKPOINT_VOLUME = "checkpoints"
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
    overlay: PodTemplateOverlay | None,
    settings: OperatorSettings,
) -> list[dict[str, Any]]:
    """Contract variables, then the overlay's extra variables. Contract variables win: an
    overlay entry with the same name is dropped, because a wrong RANK hangs the whole gang.
    Extra variables come last so they may refer to contract ones with $(VAR)."""
    contract = build_env(
        job.name,
        job.namespace,
        job.spec,
        role,
        index,
        generation,
        default_socket_ifname=settings.default_nccl_socket_ifname,
    )
    names = {var["name"] for var in contract}
    extra = [
        var
        for var in (overlay.env if overlay and overlay.env else [])
        if var.get("name") not in names
    ]
    return [*contract, *extra]


def volumes_and_mounts(
    job: Job, role: RoleSpec, settings: OperatorSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job config, a memory-backed /dev/shm and the checkpoint volume, then the overlay's."""
    checkpoint = job.spec.checkpoint
    checkpoint_source: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": checkpoint.claimName}}
        if checkpoint.claimName
        else {"emptyDir": {}}
    )
    volumes: list[dict[str, Any]] = [
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
    mounts: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_DIR, "readOnly": True},
        {"name": SHM_VOLUME, "mountPath": SHM_MOUNT_PATH},
        {"name": CHECKPOINT_VOLUME, "mountPath": checkpoint.mountPath},
    ]
    overlay = role.template
    if overlay is not None:
        volumes += overlay.volumes or []
        mounts += overlay.volumeMounts or []
    return volumes, mounts


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


def container_security_context() -> dict[str, Any]:
    """The container half of the 'restricted' Pod Security Standard."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _unreserved(values: Mapping[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (values or {}).items() if not k.startswith(RESERVED_PREFIX)}


def build_pod(
    job: Job, role: str, index: int, generation: int, settings: OperatorSettings
) -> Manifest:
    """The trainer pod `<job>-<role>-<index>` of gang `generation`.

    restartPolicy Never: NCCL cannot lose a member, so the operator restarts the whole gang
    rather than letting the kubelet restart one container into a dead collective."""
    spec = job.spec
    role_spec: RoleSpec | None = getattr(spec.roles, role)
    if role_spec is None:
        raise KeyError(f"job {job.name} has no role {role!r}")
    overlay = role_spec.template
    layout = rank_layout(spec)
    slot = layout.slot(role, index)
    name = pod_name(job.name, role, index)

    metadata = child_metadata(job, name)
    metadata["labels"] = {
        **_unreserved(overlay.labels if overlay else None),
        **metadata["labels"],
        **pod_labels(role, index, generation),
    }
    metadata["annotations"] = {
        **_unreserved(overlay.annotations if overlay else None),
        ANNOTATION_RANK: str(slot.base_rank),
        ANNOTATION_WORLD_SIZE: str(layout.world_size),
    }

    trainer = spec.trainer
    volumes, mounts = volumes_and_mounts(job, role_spec, settings)
    container: dict[str, Any] = {
        "name": TRAINER_CONTAINER,
        "image": trainer.image or settings.trainer_image,
        "command": list(trainer.command or DEFAULT_TRAINER_COMMAND),
        "env": trainer_env(job, role, index, generation, overlay, settings),
        "ports": [{"name": RENDEZVOUS_PORT_NAME, "containerPort": spec.network.masterPort}],
        "volumeMounts": mounts,
        # The last log lines become the termination message, so a failed pod's error shows
        # up in the job's Failed condition without anyone running kubectl logs.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if trainer.args:
        container["args"] = list(trainer.args)
    if trainer.imagePullPolicy:
        container["imagePullPolicy"] = trainer.imagePullPolicy
    if res := resources(role_spec):
        container["resources"] = res

    pod_spec: dict[str, Any] = {
        "hostname": name,
        "subdomain": service_name(job.name),
        "restartPolicy": "Never",
        "serviceAccountName": service_account_name(job.name),
        "terminationGracePeriodSeconds": settings.termination_grace_period_seconds,
        # Service links would inject e.g. MASTER_PORT=tcp://... for a Service named
        # "master" in the namespace; the contract alone defines the environment.
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": volumes,
    }
    if settings.pod_security_defaults:
        pod_spec["securityContext"] = pod_security_context()
        container["securityContext"] = container_security_context()
    priority = (overlay.priorityClassName if overlay else None) or spec.priorityClassName
    if priority:
        pod_spec["priorityClassName"] = priority
    if overlay is not None:
        for key in ("nodeSelector", "tolerations", "affinity", "schedulerName", "runtimeClassName"):
            value = getattr(overlay, key)
            if value:
                pod_spec[key] = value
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
