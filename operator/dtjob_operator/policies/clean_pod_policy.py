"""cleanPodPolicy: which pods a finished job deletes."""

from __future__ import annotations

from collections.abc import Iterable

from dtjob_api.spec import CleanPodPolicy
from dtjob_operator.policies.pods import Pod, is_finished, is_terminating, name_of


def pods_to_clean(pods: Iterable[Pod], policy: CleanPodPolicy | str) -> list[str]:
    """All: every pod; Running: the pods still running (finished ones stay for their logs
    until the TTL); None: nothing. Pods already being deleted are left out."""
    policy = CleanPodPolicy(policy)
    if policy == CleanPodPolicy.NONE:
        return []
    live = [p for p in pods if not is_terminating(p)]
    if policy == CleanPodPolicy.RUNNING:
        live = [p for p in live if not is_finished(p)]
    return sorted(name_of(p) for p in live)
