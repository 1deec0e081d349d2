"""A finished job: which pods go, and when the job itself goes (cleanPodPolicy + TTL)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from dtjob_api.spec import DistributedTrainingJobSpec, RunPolicy
from dtjob_operator.policies.clean_pod_policy import pods_to_clean
from dtjob_operator.policies.pods import Pod, is_finished, live_names
from dtjob_operator.policies.times import seconds_until
from dtjob_operator.policies.ttl import expiry_of


@dataclass(frozen=True)
class FinishedActions:
    """What a finished job still needs."""

    delete_pods: list[str]
    delete_job: bool
    requeue_after: float | None
    """Seconds until the TTL deletes the job; None without a TTL."""


def finished_actions(
    pods: Sequence[Pod],
    succeeded: bool,
    policy: RunPolicy,
    completion_time: datetime | None,
    now: datetime,
) -> FinishedActions:
    """Pods per cleanPodPolicy; after success also every pod still running whatever the
    policy says (parameter servers serve forever; nothing left has work to do); the job once
    ttlSecondsAfterFinished has passed since completionTime."""
    deletes = set(pods_to_clean(pods, policy.cleanPodPolicy))
    if succeeded:
        deletes.update(unfinished(pods))
    expiry = expiry_of(completion_time, policy)
    expired = expiry is not None and now >= expiry
    requeue = seconds_until(expiry, now) if expiry is not None and not expired else None
    return FinishedActions(sorted(deletes), expired, requeue)


def unfinished(pods: Sequence[Pod]) -> list[str]:
    """Names of the live pods whose containers still run (or have not started)."""
    return live_names(p for p in pods if not is_finished(p))


def lenient_run_policy(raw_spec: Mapping[str, Any] | None) -> RunPolicy:
    """The run policy of a spec that may not parse: the whole spec's if it does, else its
    runPolicy alone, else the defaults; clean-up and TTL must work for a broken job too."""
    raw = raw_spec if isinstance(raw_spec, Mapping) else {}
    try:
        return DistributedTrainingJobSpec.model_validate(raw).runPolicy
    except ValidationError:
        pass
    try:
        return RunPolicy.model_validate(raw.get("runPolicy") or {})
    except ValidationError:
        return RunPolicy()
