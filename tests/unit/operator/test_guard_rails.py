"""The admin's guard rails (api/guard_rails.py): each is refused by default with the field
and the setting named, and passes once the setting allows it; the operator's settings
build them from DTJOB_* variables."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dtjob_api.guard_rails import DEFAULT_RAILS, GuardRails
from dtjob_api.validation import validate_job
from dtjob_operator.settings import OperatorSettings

W = "spec.roles.worker.template"
C = f"{W}.spec.containers[0].securityContext"


def job(template: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    worker: dict[str, Any] = {"replicas": 2, "gpus": 1}
    if template is not None:
        worker["template"] = template
    return {"strategy": {"type": "DataParallel"}, "roles": {"worker": worker}, **spec}


def secure(**context: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "trainer", "securityContext": context}]}}


def errors(spec: dict[str, Any], rails: GuardRails = DEFAULT_RAILS) -> dict[str, str]:
    return {e.field: e.message for e in validate_job(spec, rails=rails)}


# (id, spec, field, setting named in the message, rails that allow it)
RAILS: list[tuple[str, dict[str, Any], str, str, GuardRails]] = [
    ("system priority class", job(priorityClassName="system-node-critical"),
     "spec.priorityClassName", "allowedPriorityClasses",
     GuardRails(allowed_priority_classes=("system-node-critical", "team-*"))),
    ("system priority class in the template", job({"priorityClassName": "system-cluster-critical"}),
     f"{W}.priorityClassName", "allowedPriorityClasses",
     GuardRails(allowed_priority_classes=("system-*",))),
    ("long grace period", job({"spec": {"terminationGracePeriodSeconds": 86400}}),
     f"{W}.spec.terminationGracePeriodSeconds", "maxTerminationGracePeriodSeconds",
     GuardRails(max_termination_grace_period_seconds=86400)),
    ("hostNetwork", job({"spec": {"hostNetwork": True}}), f"{W}.spec.hostNetwork",
     "allowHostNamespaces", GuardRails(allow_host_namespaces=True)),
    ("hostPID", job({"spec": {"hostPID": True}}), f"{W}.spec.hostPID",
     "allowHostNamespaces", GuardRails(allow_host_namespaces=True)),
    ("hostIPC", job({"spec": {"hostIPC": True}}), f"{W}.spec.hostIPC",
     "allowHostNamespaces", GuardRails(allow_host_namespaces=True)),
    ("privileged", job(secure(privileged=True)), f"{C}.privileged", "allowPrivileged",
     GuardRails(allow_privileged=True)),
    ("privilege escalation", job(secure(allowPrivilegeEscalation=True)),
     f"{C}.allowPrivilegeEscalation", "allowPrivileged", GuardRails(allow_privileged=True)),
    ("added capability", job(secure(capabilities={"add": ["IPC_LOCK"]})),
     f"{C}.capabilities.add[0]", "allowedCapabilities",
     GuardRails(allowed_capabilities=("IPC_LOCK",))),
    ("privileged init container",
     job({"spec": {"initContainers": [{"name": "prep", "image": "x",
                                       "securityContext": {"privileged": True}}]}}),
     f"{W}.spec.initContainers[0].securityContext.privileged", "allowPrivileged",
     GuardRails(allow_privileged=True)),
    ("hostPath", job({"volumes": [{"name": "h", "hostPath": {"path": "/data"}}]}),
     f"{W}.volumes[0].hostPath", "allowHostPath", GuardRails(allow_host_path=True)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "field", "setting", "allowing"), [r[1:] for r in RAILS], ids=[r[0] for r in RAILS]
)
def test_refused_by_default_naming_the_field_and_the_setting(
    spec: dict[str, Any], field: str, setting: str, allowing: GuardRails
) -> None:
    found = errors(spec)
    assert list(found) == [field], found
    assert f"setting {setting}" in found[field], found


@pytest.mark.parametrize(
    ("spec", "field", "setting", "allowing"), [r[1:] for r in RAILS], ids=[r[0] for r in RAILS]
)
def test_allowed_when_the_setting_allows_it(
    spec: dict[str, Any], field: str, setting: str, allowing: GuardRails
) -> None:
    assert errors(spec, allowing) == {}


def test_defaults_keep_ordinary_jobs_running() -> None:
    ordinary = job(
        {"spec": {"terminationGracePeriodSeconds": 300, "priorityClassName": "team-high",
                  "containers": [{"name": "trainer", "securityContext": {
                      "privileged": False, "allowPrivilegeEscalation": False,
                      "capabilities": {"drop": ["ALL"]}}}]}},
        priorityClassName="batch-low",
    )  # fmt: skip
    assert errors(ordinary) == {}


def test_an_allow_list_of_priority_classes_refuses_the_rest() -> None:
    rails = GuardRails(allowed_priority_classes=("team-*",))
    assert errors(job(priorityClassName="team-a"), rails) == {}
    refused = errors(job(priorityClassName="batch-low"), rails)
    assert "it allows team-*" in refused["spec.priorityClassName"]


def test_settings_build_the_guard_rails_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DTJOB_ALLOW_HOST_NAMESPACES", "true")
    monkeypatch.setenv("DTJOB_ALLOWED_CAPABILITIES", "IPC_LOCK, SYS_RESOURCE")
    monkeypatch.setenv("DTJOB_ALLOWED_PRIORITY_CLASSES", "team-*,prod")
    monkeypatch.setenv("DTJOB_MAX_TERMINATION_GRACE_PERIOD_SECONDS", "900")
    rails = OperatorSettings().guard_rails()
    assert rails == GuardRails(
        allow_host_namespaces=True,
        allowed_capabilities=("IPC_LOCK", "SYS_RESOURCE"),
        allowed_priority_classes=("team-*", "prod"),
        max_termination_grace_period_seconds=900,
    )


def test_the_operators_own_grace_period_must_fit_its_limit() -> None:
    with pytest.raises(ValidationError, match="max_termination_grace_period_seconds"):
        OperatorSettings(
            termination_grace_period_seconds=600, max_termination_grace_period_seconds=300
        )
