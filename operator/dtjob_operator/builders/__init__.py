"""Pure builders of a job's children: plain Kubernetes JSON dicts (camelCase), each owned by
the job and labelled with it. No API access here; the executor creates what they return."""

from dtjob_operator.builders.children import (
    build_children,
    build_pods,
    build_support_objects,
    child_key,
    support_keys,
)
from dtjob_operator.builders.configmaps import (
    build_config_map,
    build_history_config_map,
    build_progress_config_map,
)
from dtjob_operator.builders.job import Job, Manifest, owner_reference
from dtjob_operator.builders.pod import build_pod
from dtjob_operator.builders.rbac import build_rbac
from dtjob_operator.builders.service import build_service

__all__ = [
    "Job",
    "Manifest",
    "build_children",
    "build_config_map",
    "build_history_config_map",
    "build_pod",
    "build_pods",
    "build_progress_config_map",
    "build_rbac",
    "build_service",
    "build_support_objects",
    "child_key",
    "owner_reference",
    "support_keys",
]
