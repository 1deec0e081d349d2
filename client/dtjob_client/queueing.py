"""The admission queue as the operator published it: waiting jobs in its order (each job's
status.queuePosition, per namespace) with the namespaces' ResourceQuotas. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dtjob_client.jobs import Job
from dtjob_client.why import QuotaUse, quota_uses

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class QueueView:
    """Waiting jobs in admission order within each namespace (namespaces do not block each
    other), and every ResourceQuota of those namespaces by namespace."""

    jobs: tuple[Job, ...]
    quotas: Mapping[str, tuple[QuotaUse, ...]] = field(default_factory=dict)


def is_waiting(job: Job) -> bool:
    """Queued, or holding a queue position (a preempted job waits Suspended)."""
    return job.status.phase == "Queued" or job.status.queuePosition is not None


def queue_view(jobs: Iterable[Job], quotas: Iterable[Mapping[str, Any]]) -> QueueView:
    """The view from all jobs and ResourceQuotas listed (of one namespace or all)."""
    waiting = sorted((j for j in jobs if is_waiting(j)), key=_order)
    namespaces = {j.namespace for j in waiting}
    by_ns: dict[str, list[QuotaUse]] = {}
    for quota in quotas:
        ns = str((quota.get("metadata") or {}).get("namespace", ""))
        if ns in namespaces:
            by_ns.setdefault(ns, []).extend(quota_uses(quota))
    return QueueView(tuple(waiting), {ns: tuple(uses) for ns, uses in sorted(by_ns.items())})


def _order(job: Job) -> tuple[str, int, int, datetime, str]:
    # A job without a position yet (its first admission pass is pending) goes last, in
    # creation order: that is where FIFO puts it among equal priorities.
    pos = job.status.queuePosition
    return (job.namespace, pos is None, pos or 0, job.created or _EPOCH, job.name)
