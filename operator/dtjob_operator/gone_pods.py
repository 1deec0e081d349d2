"""The last state of the jobs' pods the watch saw deleted: where a vanished member ran.

A gang member that is gone without the reconcile having seen it go is judged by its pod,
and there is none: force-deleted off a dead node (`kubectl delete --force`, pod GC of an
out-of-service node, or this operator's own force-delete whose pass did not get to write
the restart), it would count as a failure and use up backoffLimit, though its node was
lost. The DELETED event carries the pod's last state (its node, its DisruptionTarget
condition): kept here a while, it lets the verdict say "node lost" (Kubernetes' Job
controller keeps a finalizer on its pods for the same reason; a finalizer would leave
pods stuck while the operator is down, a memory only forgets them).

Pure bookkeeping with an injected clock; caches.py feeds it from the job pods' watch.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
JobKey = tuple[str, str]

# Long enough for any pass to judge a member gone (a pass runs within seconds of the
# event; a backed-off job within the workqueue's longest delay), short enough that a
# restart's deleted pods do not pile up: they are of an older generation and never read.
KEEP_SECONDS = 600.0
# A bound on the memory whatever the churn: the oldest are forgotten first.
MAX_PODS = 10_000


class GonePods:
    """Deleted pods by (namespace, job name), the newest state of each pod name; a read
    costs the job's own entries, not everyone's."""

    def __init__(
        self,
        keep_seconds: float = KEEP_SECONDS,
        max_pods: int = MAX_PODS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keep, self._max, self._clock = keep_seconds, max_pods, clock
        self._by_job: dict[JobKey, dict[str, tuple[int, Obj]]] = {}
        # (when, which record, job, pod name), oldest first: what expires next.
        self._order: deque[tuple[float, int, JobKey, str]] = deque()
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def record(self, job: str, pod: Obj) -> None:
        """The watch saw `pod` (of job `job`) deleted."""
        meta = pod.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not namespace or not name:
            return
        key, now = (str(namespace), job), self._clock()
        with self._lock:
            which = next(self._ids)
            self._by_job.setdefault(key, {})[str(name)] = (which, pod)
            self._order.append((now, which, key, str(name)))
            self._expire(now)

    def of(self, namespace: str, job: str) -> list[Obj]:
        """The job's pods deleted within the last keep_seconds."""
        with self._lock:
            self._expire(self._clock())
            return [pod for _, pod in self._by_job.get((namespace, job), {}).values()]

    def forget(self, namespace: str, job: str) -> None:
        """The job is deleted: its pods' states answer nothing any more. (A namespace
        deleted, 1,600 pods' states were kept ten minutes for nothing, and the heap they
        held stayed the operator's for good: docs/operator-scale.md, "Memory".)"""
        key = (namespace, job)
        with self._lock:
            if self._by_job.pop(key, None) is not None:
                self._order = deque(entry for entry in self._order if entry[2] != key)

    def __len__(self) -> int:
        return len(self._order)

    def _expire(self, now: float) -> None:
        while self._order and (now - self._order[0][0] > self._keep or len(self) > self._max):
            _, which, key, name = self._order.popleft()
            pods = self._by_job.get(key, {})
            if name in pods and pods[name][0] == which:  # not recorded again since
                del pods[name]
                if not pods:
                    del self._by_job[key]
