"""Guard rails a cluster admin sets for every job the operator serves (docs/operator.md,
"Guard rails"): what a tenant's pod template or spec may reach beyond its own pods.

The CRD cannot know an admin's choices, so these are the operator's: a job that breaks
one ends Failed/InvalidSpec, its message naming the field and the setting that refuses
it. Where a rule holds whatever the settings say (nodeName), it is also CEL in the CRD
(template_spec.py) and refused at apply.

The defaults are safe for a shared cluster and leave every bundled example running:
- PriorityClasses named `system-*` are refused: their pods make the scheduler preempt
  anything, cluster add-ons included;
- terminationGracePeriodSeconds at most 300 s: a trainer that ignores SIGTERM keeps its
  GPUs through a suspend, a preemption or a gang restart for as long as it says;
- no host network, PID or IPC namespace, no privileged container, no added capability,
  no hostPath volume: each reaches the node beyond the pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from dtjob_api import podtemplate as pt
from dtjob_api.errors import FieldError
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.template_spec import PodTemplate

HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
DEFAULT_MAX_GRACE_SECONDS = 300
# Refused unless allowedPriorityClasses lists them: the classes Kubernetes keeps for the
# cluster's own components.
SYSTEM_PRIORITY_CLASSES = "system-*"


@dataclass(frozen=True)
class GuardRails:
    """An admin's guard rails (the operator's settings, Helm values in brackets)."""

    allow_host_path: bool = False
    """hostPath volumes (allowHostPath)."""
    allow_host_namespaces: bool = False
    """hostNetwork, hostPID, hostIPC (allowHostNamespaces)."""
    allow_privileged: bool = False
    """Privileged containers and allowPrivilegeEscalation: true (allowPrivileged)."""
    allowed_capabilities: tuple[str, ...] = ()
    """Linux capabilities a container may add, e.g. IPC_LOCK (allowedCapabilities)."""
    allowed_priority_classes: tuple[str, ...] = ()
    """PriorityClass names or globs a job may use; empty: every class but system-*
    (allowedPriorityClasses)."""
    max_termination_grace_period_seconds: int = DEFAULT_MAX_GRACE_SECONDS
    """Longest terminationGracePeriodSeconds a pod template may set
    (maxTerminationGracePeriodSeconds)."""

    def priority_class_allowed(self, name: str) -> bool:
        """Whether a job may name this PriorityClass."""
        if self.allowed_priority_classes:
            return any(fnmatchcase(name, glob) for glob in self.allowed_priority_classes)
        return not fnmatchcase(name, SYSTEM_PRIORITY_CLASSES)


# What an operator with no guard-rail settings holds jobs to.
DEFAULT_RAILS = GuardRails()


def guard_rail_errors(spec: DistributedTrainingJobSpec, rails: GuardRails) -> list[FieldError]:
    """What the spec and its roles' templates do that the admin's guard rails refuse
    (hostPath volumes are template_rules.py's, with the other volume checks)."""
    errors = []
    if spec.priorityClassName is not None:
        errors += _priority("spec.priorityClassName", spec.priorityClassName, rails)
    for role in ("worker", "ps", "stage"):
        role_spec = getattr(spec.roles, role)
        if role_spec is not None and role_spec.template is not None:
            base = f"spec.roles.{role}.template"
            errors += [
                FieldError(f"{base}.{path}", message)
                for path, message in _template(role_spec.template, rails)
            ]
    return errors


def _priority(field: str, name: str, rails: GuardRails) -> list[FieldError]:
    if rails.priority_class_allowed(name):
        return []
    allowed = (
        f"it allows {', '.join(rails.allowed_priority_classes)}"
        if rails.allowed_priority_classes
        else "system-* classes preempt anything in the cluster"
    )
    return [
        FieldError(
            field,
            f"PriorityClass {name!r} is not allowed by this operator (setting "
            f"allowedPriorityClasses: {allowed}); use another class or ask the cluster admin",
        )
    ]


def _template(template: PodTemplate, rails: GuardRails) -> Iterable[tuple[str, str]]:
    pod = template.spec or {}
    for path, name in (
        ("priorityClassName", template.priorityClassName),
        ("spec.priorityClassName", pod.get("priorityClassName")),
    ):
        if isinstance(name, str):
            yield from ((path, e.message) for e in _priority(path, name, rails))
    grace = pod.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace > rails.max_termination_grace_period_seconds:
        yield (
            "spec.terminationGracePeriodSeconds",
            f"{grace} s is above this operator's limit of "
            f"{rails.max_termination_grace_period_seconds} s (setting "
            "maxTerminationGracePeriodSeconds): a pod that ignores SIGTERM would keep its GPUs "
            "that long through every suspend, preemption and gang restart",
        )
    if not rails.allow_host_namespaces:
        for name in HOST_NAMESPACES:
            if pod.get(name) is True:
                yield (
                    f"spec.{name}",
                    f"{name} is not allowed by this operator (setting allowHostNamespaces): "
                    "it gives the pod the node's namespace; remove it, or ask the cluster "
                    "admin (RDMA over hostNetwork is the usual reason to allow it)",
                )
    for container in pt.containers(template):
        yield from _security(container, rails)


def _security(container: pt.At, rails: GuardRails) -> Iterable[tuple[str, str]]:
    context: Any = container.value.get("securityContext")
    if not isinstance(context, dict):
        return
    where = f"{container.path}.securityContext"
    if not rails.allow_privileged:
        if context.get("privileged") is True:
            yield (
                f"{where}.privileged",
                "privileged containers are not allowed by this operator (setting "
                "allowPrivileged): a privileged container owns the node; add the one "
                "capability it needs instead (setting allowedCapabilities)",
            )
        if context.get("allowPrivilegeEscalation") is True:
            yield (
                f"{where}.allowPrivilegeEscalation",
                "not allowed by this operator (setting allowPrivileged): remove it",
            )
    capabilities = context.get("capabilities")
    added = capabilities.get("add") if isinstance(capabilities, dict) else None
    for i, cap in enumerate(added if isinstance(added, list) else []):
        if str(cap) not in rails.allowed_capabilities:
            allowed = ", ".join(rails.allowed_capabilities) or "none"
            yield (
                f"{where}.capabilities.add[{i}]",
                f"capability {cap!r} is not allowed by this operator (setting "
                f"allowedCapabilities: {allowed}); remove it or ask the cluster admin",
            )
