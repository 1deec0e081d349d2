"""A job nested too deeply to plan: failed with reason InvalidSpec, never planned.

The API server stores objects nested up to 10,000 levels under a free-form field. Planning
such a job (validation, building, serialising) walks it recursively and could exhaust the
operator's stack, so the depth is measured first, iteratively, and a job deeper than the
limit is failed with a message that says where, without ever being planned.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dtjob_api.status import JobPhase
from dtjob_operator.constants import CONDITION_FAILED, REASON_INVALID_SPEC
from dtjob_operator.policies.times import format_time
from dtjob_operator.status import ConditionUpdate, apply_conditions


def too_deep_path(obj: object, limit: int) -> str | None:
    """The path of the first map or list nested deeper than `limit` levels, else None.

    Iterative on purpose: a recursive walk is what a hostile object defeats."""
    stack: list[tuple[object, str, int]] = [(obj, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, Mapping):
            items: list[tuple[str, object]] = [(f"{path}.{k}", v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        if depth >= limit:
            return path.lstrip(".") or "(top)"
        stack.extend((v, p, depth + 1) for p, v in items)
    return None


def too_deep_message(path: str, limit: int) -> str:
    """What the user reads in the Failed condition and the Warning event."""
    shown = path if len(path) <= 200 else path[:200] + "..."
    return (
        f"{shown}: the object is nested more than {limit} levels deep; "
        "remove the nesting there (no valid spec comes near this depth) and re-create the job"
    )


def too_deep_status(
    prior: Mapping[str, Any], message: str, now: datetime, generation: int | None
) -> dict[str, Any]:
    """The prior status turned Failed with a Failed=True InvalidSpec condition."""
    status = dict(prior)
    status["phase"] = JobPhase.FAILED.value
    status["completionTime"] = status.get("completionTime") or format_time(now)
    status["conditions"] = apply_conditions(
        prior.get("conditions") or [],
        [ConditionUpdate(CONDITION_FAILED, True, REASON_INVALID_SPEC, message)],
        now,
        generation,
    )
    return status
