"""All children a job should have, in the order they must be created."""

from __future__ import annotations

from dtjob_operator.builders.configmaps import (
    build_config_map,
    build_history_config_map,
    build_progress_config_map,
)
from dtjob_operator.builders.job import Job, Manifest
from dtjob_operator.builders.network_policy import build_network_policy
from dtjob_operator.builders.pod import build_pod
from dtjob_operator.builders.rbac import build_rbac
from dtjob_operator.builders.service import build_service
from dtjob_operator.naming import (
    config_map_name,
    history_config_map_name,
    network_policy_name,
    progress_config_map_name,
    role_binding_name,
    role_name,
    service_account_name,
    service_name,
)
from dtjob_operator.settings import OperatorSettings


def build_support_objects(job: Job, settings: OperatorSettings | None = None) -> list[Manifest]:
    """Everything but the pods: RBAC first (a pod cannot be admitted before its
    ServiceAccount exists), then the ConfigMaps it mounts, then the Service, and the
    NetworkPolicy when settings.network_policy is on (before the pods it protects)."""
    objects = [
        *build_rbac(job),
        build_config_map(job),
        build_progress_config_map(job),
        build_history_config_map(job),
        build_service(job),
    ]
    if settings is not None and settings.network_policy:
        objects.append(build_network_policy(job))
    return objects


def support_keys(job: Job, settings: OperatorSettings | None = None) -> list[tuple[str, str]]:
    """child_key of each of build_support_objects(job, settings), from the names alone: a
    pass whose job has them all builds none (the config's JSON, the Role's rules).
    tests/unit/operator/test_builders.py holds the two equal."""
    name = job.name
    keys = [
        ("ServiceAccount", service_account_name(name)),
        ("Role", role_name(name)),
        ("RoleBinding", role_binding_name(name)),
        ("ConfigMap", config_map_name(name)),
        ("ConfigMap", progress_config_map_name(name)),
        ("ConfigMap", history_config_map_name(name)),
        ("Service", service_name(name)),
    ]
    if settings is not None and settings.network_policy:
        keys.append(("NetworkPolicy", network_policy_name(name)))
    return keys


def build_pods(job: Job, generation: int, settings: OperatorSettings) -> list[Manifest]:
    """The gang of `generation`, in rank order (rank 0 first: it hosts the rendezvous)."""
    return [
        build_pod(job, slot.role, slot.index, generation, settings) for slot in job.layout.slots
    ]


def build_children(job: Job, settings: OperatorSettings, generation: int = 0) -> list[Manifest]:
    """Every child of the job for gang `generation` (status.restarts)."""
    return [*build_support_objects(job, settings), *build_pods(job, generation, settings)]


def child_key(manifest: Manifest) -> tuple[str, str]:
    """(kind, name): how the planner matches desired children with existing ones (a Role
    and a ConfigMap may share a name)."""
    return manifest["kind"], manifest["metadata"]["name"]
