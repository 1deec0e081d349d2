"""The job's status, computed purely from what the planner decided and what exists.

The planner (lifecycle.py) decides the phase and which conditions change; this module turns
that into the status document: replica counts of the current gang, the READY column,
conditions whose lastTransitionTime moves only when their status flips, and the progress
the trainer reported. The result is a plain camelCase dict, produced through the API model
so its shape always matches the CRD schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from dtjob_api.aliases import resolved_type
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.status import DistributedTrainingJobStatus, JobPhase, Progress
from dtjob_operator.constants import (
    CONDITION_ADMITTED,
    CONDITION_RUNNING,
    STATUS_FALSE,
    STATUS_TRUE,
)
from dtjob_operator.envcontract import job_roles
from dtjob_operator.naming import progress_config_map_name
from dtjob_operator.policies.pods import Pod, is_finished, is_ready, phase_of, role_of
from dtjob_operator.policies.times import format_time

# lossShort is the operator's rendering of loss, never the trainer's.
PROGRESS_FIELDS = frozenset(Progress.model_fields) - {"lossShort"}


@dataclass(frozen=True)
class ConditionUpdate:
    """Set condition `type` to `status` with a reason and message."""

    type: str
    status: bool
    reason: str
    message: str = ""


@dataclass(frozen=True)
class StatusDecision:
    """What the planner decided; everything else in the status is derived."""

    phase: JobPhase
    conditions: Sequence[ConditionUpdate] = ()
    restarts: int = 0
    counted_restarts: int = 0
    start_time: datetime | None = None
    completion_time: datetime | None = None
    last_restart_time: datetime | None = None
    gang: Sequence[Pod] = field(default_factory=tuple)
    """The live pods of the current generation (what replicaStatuses count)."""


def count_replicas(
    spec: DistributedTrainingJobSpec, gang: Iterable[Pod]
) -> dict[str, dict[str, int]]:
    """Per role of the spec: total (desired), active (not finished), ready, succeeded,
    failed, counted over the current gang only (older generations are leftovers)."""
    counts = {
        name: {"total": role.replicas, "active": 0, "ready": 0, "succeeded": 0, "failed": 0}
        for name, role in job_roles(spec)
    }
    for pod in gang:
        role = role_of(pod)
        if role not in counts:
            continue
        c = counts[role]
        phase = phase_of(pod)
        if not is_finished(pod):
            c["active"] += 1
        if is_ready(pod):
            c["ready"] += 1
        if phase == "Succeeded":
            c["succeeded"] += 1
        elif phase == "Failed":
            c["failed"] += 1
    return counts


def ready_column(replicas: Mapping[str, Mapping[str, int]]) -> str:
    """Ready pods over desired pods, e.g. "3/4" (kubectl's WORKERS column)."""
    ready = sum(r["ready"] for r in replicas.values())
    total = sum(r["total"] for r in replicas.values())
    return f"{ready}/{total}"


def apply_conditions(
    current: Sequence[Mapping[str, Any]],
    updates: Iterable[ConditionUpdate],
    now: datetime,
    observed_generation: int | None,
) -> list[dict[str, Any]]:
    """`current` with `updates` applied, order kept, new types appended. lastTransitionTime
    changes only when a condition's status flips; reason and message follow the update."""
    result = [dict(c) for c in current]
    for update in updates:
        status = STATUS_TRUE if update.status else STATUS_FALSE
        existing = next((c for c in result if c.get("type") == update.type), None)
        if existing is None:
            existing = {"type": update.type}
            result.append(existing)
        if existing.get("status") != status or not existing.get("lastTransitionTime"):
            existing["lastTransitionTime"] = format_time(now)
        existing.update(status=status, reason=update.reason, message=update.message)
        if observed_generation is not None:
            existing["observedGeneration"] = observed_generation
    return result


def reason_of(conditions: Sequence[Mapping[str, Any]]) -> str | None:
    """The one word for `kubectl get dtj`: Running=False's reason, else Admitted=False's;
    None while the job runs (or before either condition exists)."""
    for type_ in (CONDITION_RUNNING, CONDITION_ADMITTED):
        for c in conditions:
            if c.get("type") == type_ and c.get("status") == STATUS_FALSE:
                return str(c.get("reason") or "") or None
    return None


def read_progress(job_name: str, config_maps: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The progress the trainer wrote, or None; a malformed document is ignored."""
    for cm in config_maps:
        if cm["metadata"]["name"] == progress_config_map_name(job_name):
            raw = (cm.get("data") or {}).get("progress.json")
            if not raw:
                return None
            try:
                value = json.loads(raw)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def progress_of(reported: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The trainer's progress document in status form; unknown keys are dropped and a
    malformed document is ignored (a trainer must not be able to break the status)."""
    if not reported:
        return None
    known = {k: v for k, v in reported.items() if k in PROGRESS_FIELDS}
    try:
        progress = Progress.model_validate(known)
    except ValidationError:
        return None
    if progress.loss is not None:
        progress = progress.model_copy(update={"lossShort": short_number(progress.loss)})
    return progress.to_api() or None


def short_number(value: float) -> str:
    """A number a person reads at a glance: 4 significant digits (0.3850, 12.35, 1.235e-05;
    the trailing zeros say how many digits are shown)."""
    return "0" if value == 0 else f"{value:#.4g}".rstrip(".")


def compute_status(
    prior: Mapping[str, Any],
    spec: DistributedTrainingJobSpec | None,
    decision: StatusDecision,
    *,
    now: datetime,
    observed_generation: int | None,
    progress: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The full status document. `spec` is None for a spec that does not parse (no replica
    counts then); `progress` is the trainer's latest report, else the prior one is kept."""
    replicas = count_replicas(spec, decision.gang) if spec is not None else {}
    conditions = apply_conditions(
        prior.get("conditions") or [], decision.conditions, now, observed_generation
    )
    status = DistributedTrainingJobStatus.model_validate(
        {
            "phase": decision.phase,
            "strategy": str(resolved_type(spec.strategy.type)) if spec is not None else None,
            "conditions": conditions,
            "reason": reason_of(conditions),
            "replicaStatuses": replicas,
            "ready": ready_column(replicas) if replicas else None,
            "restarts": decision.restarts,
            "countedRestarts": decision.counted_restarts,
            "startTime": _time(decision.start_time),
            "completionTime": _time(decision.completion_time),
            "lastRestartTime": _time(decision.last_restart_time),
            "progress": progress_of(progress) or progress_of(prior.get("progress")),
            "observedGeneration": observed_generation,
        }
    )
    return status.to_api()


def _time(value: datetime | None) -> str | None:
    return format_time(value) if value is not None else None


def admitted_in(status: dict[str, Any]) -> bool:
    """The status's Admitted condition is True."""
    return any(
        c.get("type") == CONDITION_ADMITTED and c.get("status") == STATUS_TRUE
        for c in status.get("conditions") or []
    )


def admitted_condition(status: dict[str, Any]) -> dict[str, Any]:
    """The Admitted condition ({} without one)."""
    return next(
        (c for c in status.get("conditions") or [] if c.get("type") == CONDITION_ADMITTED), {}
    )


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch that turns `old` into `new`: keys only in `old` are set to None, at any
    depth (a merge patch merges nested objects, so a key dropped inside one would stay)."""
    patch: dict[str, Any] = dict(new)
    for key, value in old.items():
        if key not in new:
            patch[key] = None
        elif isinstance(value, dict) and isinstance(new[key], dict):
            patch[key] = status_patch(value, new[key])
    return patch
