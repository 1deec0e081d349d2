"""What the operator refuses in a role's pod template, beyond what the CRD schema says.

The embedded core/v1 schema checks types, enum values and unknown fields. What it cannot
say is checked here, so that a job that could never get its pods ends Failed/InvalidSpec
with the field named, instead of sitting "Queued" while every pod creation fails:
- the operator's contract: env names it sets, its volumes and mount paths, dtjob.io/*
  labels and annotations, restartPolicy, hostname/subdomain, the trainer's resources
  (from the role) and rendezvous port;
- what core/v1 validates only when a pod is created: a volume with no or two sources, a
  mount of a volume that does not exist, duplicate names and paths, label syntax, the
  256 KiB annotation limit;
- hostPath volumes, unless the admin's guard rails allow them (guard_rails.py has the
  others);
- nodeName (placement belongs to the admission and the scheduler);
- checkpoint.mountPath and the trainer's mounts at or over /dev/shm or the job config,
  however the path is spelled (paths.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from dtjob_api import podtemplate as pt
from dtjob_api.contract import (
    CHECKPOINT_VOLUME,
    CONFIG_VOLUME,
    LABEL_MANAGED_BY,
    RENDEZVOUS_PORT_NAME,
    RESERVED_PREFIX,
    SHM_VOLUME,
    TRAINER_CONTAINER,
)
from dtjob_api.errors import FieldError
from dtjob_api.guard_rails import DEFAULT_RAILS, GuardRails
from dtjob_api.paths import normalised, plain_problem, reserved_dir
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.template_spec import PodTemplate

# Every variable the env contract may set (envcontract.build_env; a unit test keeps the
# two in step), with the field that sets it where a job can.
CONTRACT_ENV: dict[str, str] = {
    **dict.fromkeys(
        (
            "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "NNODES",
            "NODE_RANK", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
            "PET_MASTER_ADDR", "PET_MASTER_PORT", "DTJ_JOB", "DTJ_NAMESPACE", "DTJ_ROLE",
            "DTJ_ROLE_INDEX", "DTJ_STRATEGY", "DTJ_BACKEND", "DTJ_CONFIG",
            "DTJ_CHECKPOINT_DIR", "DTJ_RENDEZVOUS_TIMEOUT", "DTJ_PROGRESS_CONFIGMAP",
            "DTJ_HISTORY_CONFIGMAP", "DTJ_GANG_GENERATION", "DTJ_PS_HOSTS",
            "DTJ_WORKER_HOSTS", "DTJ_PP_SIZE", "DTJ_DP_SIZE", "DTJ_TP_SIZE",
            "DTJ_STAGE_INDEX", "DTJ_HEARTBEAT_SECONDS",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_ERROR_FILE",
        ),
        "",
    ),
    "DTJ_STALL_DUMP_SECONDS": "spec.runPolicy.progressDeadlineSeconds",
    "NCCL_DEBUG": "spec.network.ncclDebug",
    "NCCL_SOCKET_IFNAME": "spec.network.ncclSocketIfname",
}  # fmt: skip
RESERVED_VOLUMES = (CONFIG_VOLUME, SHM_VOLUME, CHECKPOINT_VOLUME)
MAX_ANNOTATION_BYTES = 256 * 1024  # core/v1's TotalAnnotationSizeLimitB
# core/v1 Volume: every property but `name` is a source, and exactly one must be set.
_NOT_A_SOURCE = {"name"}
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def template_errors(
    spec: DistributedTrainingJobSpec, rails: GuardRails | None = DEFAULT_RAILS
) -> list[FieldError]:
    """Every problem of every role's template, and of the checkpoint paths (hostPath by
    the guard rails; None: a job that already started, which keeps its hostPath)."""
    allow_host_path = rails is None or rails.allow_host_path
    errors = checkpoint_errors(spec)
    for role in ("worker", "ps", "stage"):
        role_spec = getattr(spec.roles, role)
        if role_spec is not None and role_spec.template is not None:
            base = f"spec.roles.{role}.template"
            problems = role_template_errors(role_spec.template, spec, allow_host_path)
            errors += [FieldError(f"{base}.{path}", message) for path, message in problems]
    return errors


def checkpoint_errors(spec: DistributedTrainingJobSpec) -> list[FieldError]:
    """checkpoint.mountPath must be plain and may not be or sit inside /dev/shm or the job
    config (the CRD's CHECKPOINT_CEL, again)."""
    path = spec.checkpoint.mountPath
    if problem := plain_problem(path):
        return [FieldError("spec.checkpoint.mountPath", problem)]
    if clash := reserved_dir(path):
        ours, what = clash
        return [
            FieldError(
                "spec.checkpoint.mountPath",
                f"{path!r} is inside {ours}, where the operator mounts {what}; "
                "choose another directory (default /checkpoints)",
            )
        ]
    return []


def role_template_errors(
    template: PodTemplate, spec: DistributedTrainingJobSpec, allow_host_path: bool
) -> list[tuple[str, str]]:
    """(path below the template, message) for one role's template."""
    return [
        *_both_ways(template),
        *_pod_fields(template),
        *_metadata(template),
        *_volumes(template, allow_host_path),
        *_mounts(template, spec),
        *_containers(template, spec),
        *_trainer_env(template),
    ]


def _both_ways(template: PodTemplate) -> Iterable[tuple[str, str]]:
    pod = template.spec or {}
    for name in pt.SHORT_VALUES:
        if getattr(template, name) is not None and name in pod:
            yield name, f"also set as spec.{name}; set it in one place"
    for kind, maps in (
        ("labels", pt.label_maps(template)),
        ("annotations", pt.annotation_maps(template)),
    ):
        if len(maps) == 2:  # metadata.<kind> and the short <kind>
            for key in sorted(set(maps[0].value) & set(maps[1].value)):
                yield f"{kind}[{key}]", f"also set in metadata.{kind}; set it in one place"


def _pod_fields(template: PodTemplate) -> Iterable[tuple[str, str]]:
    pod = template.spec or {}
    if pod.get("restartPolicy") not in (None, "Never"):
        yield (
            "spec.restartPolicy",
            f"must be Never (got {pod['restartPolicy']!r}): the operator restarts the whole "
            "gang, because a collective cannot take back one restarted process; see "
            "spec.runPolicy.restartPolicy",
        )
    if "nodeName" in pod:
        yield (
            "spec.nodeName",
            "binds the pods to a node without the scheduler, past taints, quotas and the gang "
            "admission's placement; use nodeSelector or affinity to choose nodes",
        )
    for name in ("hostname", "subdomain"):
        if name in pod:
            yield (
                f"spec.{name}",
                "set by the operator: it gives every pod the stable DNS name "
                "<job>-<role>-<index>.<job> the rendezvous uses; remove it",
            )


def _metadata(template: PodTemplate) -> Iterable[tuple[str, str]]:
    for labels in pt.label_maps(template):
        for key, value in labels.value.items():
            where = f"{labels.path}[{key}]"
            if key.startswith(RESERVED_PREFIX) or key == LABEL_MANAGED_BY:
                yield where, "reserved: the operator sets this label to place the pod in its job"
            elif problem := _qualified_name_problem(key):
                yield where, f"not a valid label key: {problem}"
            elif value and (len(value) > 63 or not _LABEL_NAME.match(value)):
                yield (
                    where,
                    f"not a valid label value ({value[:70]!r}): at most 63 characters, "
                    "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
                )
    total = 0
    for notes in pt.annotation_maps(template):
        for key, value in notes.value.items():
            total += len(key) + len(value)
            where = f"{notes.path}[{key}]"
            if key.startswith(RESERVED_PREFIX):
                yield where, "reserved: dtjob.io/* annotations are the operator's"
            elif problem := _qualified_name_problem(key):
                yield where, f"not a valid annotation key: {problem}"
    if total > MAX_ANNOTATION_BYTES:
        path = pt.annotation_maps(template)[-1].path
        yield (
            path,
            f"annotations total {total} bytes; Kubernetes allows at most 256 KiB "
            f"({MAX_ANNOTATION_BYTES})",
        )


def _qualified_name_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return f"{key!r} has more than one '/'"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"the prefix of {key!r} must be a DNS subdomain (e.g. example.com)"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (
            f"the name part of {key!r} must be 1-63 characters: alphanumerics, '-', '_' or "
            "'.', starting and ending with an alphanumeric"
        )
    return None


def _volumes(template: PodTemplate, allow_host_path: bool) -> Iterable[tuple[str, str]]:
    seen: Counter[str] = Counter()
    for volume in pt.volumes(template):
        name = volume.value.get("name")
        seen[str(name)] += 1
        if not isinstance(name, str) or not _DNS1123_LABEL.match(name) or len(name) > 63:
            yield (
                f"{volume.path}.name",
                f"must be a DNS label (lowercase alphanumerics and '-'), got {name!r}",
            )
        elif name in RESERVED_VOLUMES:
            yield (
                f"{volume.path}.name",
                f"{name!r} is one of the operator's volumes "
                f"({', '.join(RESERVED_VOLUMES)}); rename it",
            )
        elif seen[name] == 2:
            yield (
                f"{volume.path}.name",
                f"a volume named {name!r} is already defined; names must be unique",
            )
        sources = sorted(set(volume.value) - _NOT_A_SOURCE)
        if len(sources) != 1:
            got = " and ".join(sources) if sources else "none"
            yield (
                volume.path,
                "a volume needs exactly one source (emptyDir, persistentVolumeClaim, "
                f"configMap, ...); got {got}",
            )
        if "hostPath" in volume.value and not allow_host_path:
            yield (
                f"{volume.path}.hostPath",
                "hostPath volumes are not allowed by this operator (setting allowHostPath); "
                "use a persistentVolumeClaim",
            )


def _mounts(template: PodTemplate, spec: DistributedTrainingJobSpec) -> Iterable[tuple[str, str]]:
    defined = {str(v.value.get("name")) for v in pt.volumes(template)} | set(RESERVED_VOLUMES)
    for mount in pt.mounts(template):
        name = mount.value.get("name")
        if name not in defined:
            yield f"{mount.path}.name", f"no volume named {name!r} in the template's volumes"
    # Compared in their normalised form: the kubelet resolves '//', '.' and '..' (paths.py).
    checkpoints = normalised(spec.checkpoint.mountPath)
    seen: set[str] = set()
    for mount in pt.trainer_items(template, "volumeMounts"):
        written = str(mount.value.get("mountPath", ""))
        path = normalised(written) if written.startswith("/") else written
        where = reserved_dir(path)
        clash = where[0] if where else None
        if clash is None and path == checkpoints:
            clash = f"{checkpoints} (spec.checkpoint.mountPath)"
        if clash is not None:
            yield (
                f"{mount.path}.mountPath",
                f"{written!r} is at or inside {clash}, where the operator mounts its own volume",
            )
        elif path in seen:
            yield (
                f"{mount.path}.mountPath",
                f"{written!r} is already mounted in the trainer container",
            )
        seen.add(path)


def _containers(
    template: PodTemplate, spec: DistributedTrainingJobSpec
) -> Iterable[tuple[str, str]]:
    names: Counter[str] = Counter()
    for container in pt.containers(template):
        name = str(container.value.get("name"))
        names[name] += 1
        if names[name] == 2:
            yield (
                f"{container.path}.name",
                f"a container named {name!r} already exists; names must be unique across "
                "containers and initContainers",
            )
        elif name == TRAINER_CONTAINER and container.path.startswith("spec.initContainers"):
            yield (
                f"{container.path}.name",
                f"{TRAINER_CONTAINER!r} names the training container; give the init "
                "container another name",
            )
        if name != TRAINER_CONTAINER or not container.path.startswith("spec.containers"):
            continue
        if "resources" in container.value:
            yield (
                f"{container.path}.resources",
                "the trainer's resources come from the role (gpus, cpu, memory); set them there",
            )
        for i, port in enumerate(container.value.get("ports") or []):
            if isinstance(port, dict) and (
                port.get("name") == RENDEZVOUS_PORT_NAME
                or port.get("containerPort") == spec.network.masterPort
            ):
                yield (
                    f"{container.path}.ports[{i}]",
                    f"the operator's rendezvous port ({RENDEZVOUS_PORT_NAME}, "
                    f"{spec.network.masterPort}); change spec.network.masterPort to move it",
                )


def _trainer_env(template: PodTemplate) -> Iterable[tuple[str, str]]:
    for var in pt.trainer_items(template, "env"):
        name = var.value.get("name")
        if name in CONTRACT_ENV:
            field = CONTRACT_ENV[name]
            hint = f"; set {field} instead" if field else ""
            yield f"{var.path}.name", f"{name} is set by the operator (the env contract){hint}"
