"""Nodes every job keeps off (issue 36): those that several jobs' restarts pointed at within
their avoidance time (policies/node_blame.cluster_suspects, `suspectNodeJobs` jobs). Read
from the jobs' own status.avoidedNodes in the cache, so nothing is stored apart and an
operator restart loses nothing. Worked out at most every REFRESH_SECONDS (the reconcile
asks on every pass; a scan of every job per pass would cost O(jobs^2) in a burst). A node
that becomes suspect gets a Warning Event (`kubectl describe node` shows it) and the
dtjob_suspect_nodes gauge follows the count; with taint_suspect_nodes the node is also
tainted dtjob.io/suspect for an admin to inspect (policies/suspect_taint.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from dtjob_operator.policies.node_blame import cluster_suspects

log = logging.getLogger(__name__)
REFRESH_SECONDS = 5.0
REASON_SUSPECT = "SuspectNode"

Obj = dict[str, Any]


class SuspectNodes:
    """The current suspect nodes; thread-safe (the reconcile workers share it)."""

    def __init__(
        self,
        min_jobs: int,
        list_jobs: Callable[[], Iterable[Obj]],
        list_nodes: Callable[[], Iterable[Obj]],
        announce: Callable[[Obj, str], None],
        gauge: Callable[[int], None],
        taint: Callable[[str, Sequence[str], str], None] | None = None,
    ) -> None:
        self.min_jobs = min_jobs
        self._list_jobs, self._list_nodes = list_jobs, list_nodes
        self._announce, self._gauge, self._taint = announce, gauge, taint
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._current: dict[str, tuple[str, ...]] = {}

    def current(self) -> frozenset[str]:
        """The suspect nodes' names, at most REFRESH_SECONDS old."""
        if self.min_jobs <= 0:
            return frozenset()
        with self._lock:
            if time.monotonic() - self._at >= REFRESH_SECONDS:
                self._refresh()
            return frozenset(self._current)

    def renew(self) -> frozenset[str]:
        """Worked out afresh now: a job has just written a new avoidance, which may make a
        suspect (its later passes may all fall within REFRESH_SECONDS, and nothing else
        would look again before the next resync)."""
        with self._lock:
            self._at = float("-inf")
        return self.current()

    def _refresh(self) -> None:
        now = datetime.now(UTC)
        found = cluster_suspects(self._list_jobs(), now, self.min_jobs)
        new = {n: jobs for n, jobs in found.items() if n not in self._current}
        self._current, self._at = found, time.monotonic()
        self._gauge(len(found))
        if not new:
            return
        nodes = {(n.get("metadata") or {}).get("name"): n for n in self._list_nodes()}
        for name, jobs in new.items():
            message = (
                f"every dtjob job keeps off this node: restarts of {len(jobs)} jobs pointed at "
                f"it ({', '.join(jobs[:5])}); see their avoidedNodes for why"
            )
            node = nodes.get(name) or {"metadata": {"name": name}}
            self._announce(node, message)
            if self._taint is not None:  # settings.taint_suspect_nodes
                self._taint(name, jobs, message)
