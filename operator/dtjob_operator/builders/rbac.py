"""A ServiceAccount per job whose only right is to update that job's progress and history."""

from __future__ import annotations

from dtjob_api import podtemplate as pt
from dtjob_operator.builders.job import Job, Manifest, child_metadata
from dtjob_operator.naming import (
    history_config_map_name,
    progress_config_map_name,
    role_binding_name,
    role_name,
    service_account_name,
)


def build_rbac(job: Job) -> list[Manifest]:
    """ServiceAccount, Role and RoleBinding, in the order they must exist.

    The Role names the job's progress and history ConfigMaps (resourceNames) and allows
    only get and patch, so a compromised trainer can change nothing but its own job's
    progress and loss history. Pods
    whose template names its own serviceAccountName run as that account, so it is bound
    too: progress reporting keeps working, and the account gains only this one right."""
    sa = service_account_name(job.name)
    role = role_name(job.name)
    accounts = [sa, *sorted(user_service_accounts(job) - {sa})]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": child_metadata(job, sa),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": child_metadata(job, role),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [
                        progress_config_map_name(job.name),
                        history_config_map_name(job.name),
                    ],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": child_metadata(job, role_binding_name(job.name)),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [
                {"kind": "ServiceAccount", "name": name, "namespace": job.namespace}
                for name in accounts
            ],
        },
    ]


def user_service_accounts(job: Job) -> set[str]:
    """serviceAccountName of each role's pod template, where one is set."""
    names = set()
    for role in ("worker", "ps", "stage"):
        role_spec = getattr(job.spec.roles, role)
        if role_spec is not None:
            name = pt.folded_pod_spec(role_spec.template).get("serviceAccountName")
            if isinstance(name, str) and name:
                names.add(name)
    return names
