"""The admission's side effects: gather a snapshot, run a pass, hand out the verdicts.

One thread runs passes, one at a time (decisions are serialised), whenever something that
can change them happens (a job waits, a job stops, a quota changes) and, while a job waits,
at least every `resync_seconds`; bursts of requests share one pass. A pass reads the jobs
(their status holds the admissions, so an operator restart needs no state), unfinished
pods, nodes, ResourceQuotas and PriorityClasses from the watch-backed caches (caches.py);
the first pass of a new leader lists the jobs from the API server.

Verdicts go into the AdmissionBook (book.py); the per-job reconcile reads it (admitted? position?
preempted?) and writes the job's status, so the status has one writer. The book also keeps
admissions the reconcile has not written yet, so the next pass counts them as reserved.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from dtjob_operator.admission.book import AdmissionBook
from dtjob_operator.admission.decide import Decisions, decide
from dtjob_operator.admission.resources import (
    Resources,
    gpu_units,
    pod_host_ports,
    pod_requests,
)
from dtjob_operator.admission.snapshot import (
    GangPod,
    Snapshot,
    build_snapshot,
    gang_pods,
    is_admitted,
    requeue_not_before,
)
from dtjob_operator.admission.usage import PodTally
from dtjob_operator.admission.view_memo import ViewMemo
from dtjob_operator.api_client import is_transport_error
from dtjob_operator.builders.job import elastic_size, is_elastic
from dtjob_operator.heap import HeapTrimmer
from dtjob_operator.k8s import KubeApi, versions
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.policies.node_blame import cluster_suspects
from dtjob_operator.policies.times import parse_time
from dtjob_operator.policies.too_deep import too_deep_path
from dtjob_operator.settings import OperatorSettings

log = logging.getLogger(__name__)

# Least time between two heap trims at idle moments (heap.py).
HEAP_TRIM_SECONDS = 30.0
JobKey = tuple[str, str]
Obj = Mapping[str, Any]
T = TypeVar("T")


class Reads(Protocol):
    """Where a pass reads jobs, pods, nodes, quotas and classes: the caches, or the API
    server."""

    def list_jobs(self, namespaces: list[str] | None = None) -> Sequence[Obj]: ...
    def list_all_pods(self) -> Sequence[Obj]: ...
    def list_nodes(self) -> Sequence[Obj]: ...
    def list_resource_quotas(self) -> Sequence[Obj]: ...
    def list_priority_classes(self) -> Sequence[Obj]: ...


class AdmissionController:
    """Runs admission passes on a thread of its own (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        metrics: OperatorMetrics,
        book: AdmissionBook,
        enqueue: Callable[[JobKey], None],
        is_leader: Callable[[], bool] = lambda: True,
        reads: Reads | None = None,
        owns: Callable[[Any], bool] = lambda _job: True,
    ) -> None:
        self.api = api
        # Which jobs this admission decides (router.py): the others' pods still count on the
        # nodes and in the quotas like anyone's.
        self.owns = owns
        self.reads: Reads = reads or api
        self.settings = settings
        self.metrics = metrics
        self.book = book
        self.enqueue = enqueue
        self.is_leader = is_leader
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gangs: dict[tuple[str, object, object, object], list[GangPod] | None] = {}
        self._pass_lock = threading.Lock()
        self._fresh_jobs = True  # the next pass lists jobs from the API server (gather)
        self._suspects: frozenset[str] = frozenset()  # nodes placed last (_list)
        # Pod requests by (uid, resourceVersion): a pod's requests change only with a new
        # version; kept for the pods of the last pass.
        self._requests: dict[tuple[object, object], Resources] = {}
        self._host_ports: dict[tuple[object, object], tuple[str, ...]] = {}  # likewise
        self._views = ViewMemo()  # the jobs' views, viewed again only when they change
        self._tally = PodTally()  # the pods' shares, counted again only when they change
        self.heap = HeapTrimmer(HEAP_TRIM_SECONDS)
        self._nothing_waits = False  # the last pass found no job waiting for admission

    def request(self) -> None:
        """Ask for a pass soon (many requests before it starts make one pass)."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="admission", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            asked = self._wake.wait(timeout=self.settings.resync_seconds)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not asked and self._nothing_waits:
                # A pass with no job waiting can admit nothing, and whatever changes that (a
                # job queued, a gang restarted) asks for a pass: at 1,000 running jobs the
                # timer's passes were most of the operator's CPU at rest.
                self.heap.idle()  # an idle moment: give freed heap back (heap.py)
                continue
            if not self.is_leader():
                self.list_jobs_fresh()
                continue
            try:
                self.run_pass()
            except Exception as exc:
                self.list_jobs_fresh()
                if is_transport_error(exc):  # an outage: one line, not a traceback a second
                    log.warning("admission pass: API server unreachable; retrying")
                else:
                    log.exception("admission pass failed; retrying")
                self._stop.wait(1.0)
                self._wake.set()
            self._stop.wait(self.settings.admission_min_interval_seconds)

    def list_jobs_fresh(self) -> None:
        """The next pass lists the jobs from the API server, not the cache (see gather)."""
        self._fresh_jobs = True

    # -- one pass -------------------------------------------------------------------------

    def run_pass(self) -> Decisions:
        """Gather, decide, record, wake the jobs whose verdict changed."""
        with self._pass_lock:
            started = time.monotonic()
            since = self.book.epoch()
            listed = self._list()
            snapshot = self._with_memory(self._snapshot(listed))
            decisions = decide(snapshot, preemption=self.settings.preemption)
            if decisions.admitted and self._quotas_moved(listed):
                snapshot = self._with_memory(self._snapshot(listed))
                decisions = decide(snapshot, preemption=self.settings.preemption)
            changed = self.book.record(decisions, since)
            for uid in changed:
                self.enqueue(decisions.keys[uid])
            for uid in decisions.preempt:
                log.info("preempting %s/%s", *decisions.keys[uid])
            self._observe(snapshot, decisions, time.monotonic() - started)
            return decisions

    def _with_memory(self, snapshot: Snapshot) -> Snapshot:
        """What earlier passes decided that this one builds on: placements given, since
        when elastic jobs could grow, and the resizes decided."""
        return replace(snapshot, kept=self.book.kept_placements(),
                       growable_since=self.book.growable_since(),
                       resizing=self.book.resizing())  # fmt: skip

    def gather(self) -> Snapshot:
        """List what the pass reads and fold it into a Snapshot."""
        with self._pass_lock:  # the memos and the tally serve one pass at a time
            return self._snapshot(self._list())

    def _list(self) -> dict[str, list[Obj]]:
        # Jobs from the cache, which reads a job this replica wrote and has not seen back
        # yet from the API server (Caches.list_jobs), and admissions not yet written are in
        # the book. The first pass after this replica becomes the leader, or after a failed
        # pass, lists them fresh: the previous leader's last writes may be in flight. A pod
        # or node event still in flight makes no wrong admission (a gang's missing pods are
        # counted as reserved; see decide.py); a quota event is checked (_quotas_moved).
        namespaces = self.settings.namespaces or None
        fresh, self._fresh_jobs = self._fresh_jobs, False
        every = list(self.api.list_jobs(namespaces) if fresh else self.reads.list_jobs(namespaces))
        jobs = [j for j in every if self.owns(j)]
        live = {j["metadata"]["uid"] for j in jobs}
        self._gangs = {k: v for k, v in self._gangs.items() if k[0] in live}
        # Nodes several jobs' restarts pointed at (whoever admitted those jobs) are the last
        # room any gang gets (policies/node_blame.py, suspects.py; _snapshot).
        now = datetime.now(UTC)
        self._suspects = frozenset(cluster_suspects(every, now, self.settings.suspect_node_jobs))
        return {
            "jobs": jobs,
            "pods": list(self.reads.list_all_pods()),
            "nodes": list(self.reads.list_nodes()),
            "quotas": list(self.reads.list_resource_quotas()),
            "priority_classes": list(self.reads.list_priority_classes()),
        }

    def _quotas_moved(self, listed: dict[str, list[Obj]]) -> bool:
        """Before a pass admits, the quotas as the API server has them now: the watch of
        quotas and that of jobs are separate streams, so a quota created (or lowered) just
        before a job may not be in the cache when the job's pass runs, and the job would be
        admitted past it and meet the quota only at pod creation, outside the queue. One
        list of a few objects, only in passes that admit; True (with `listed` updated) when
        they differ from the cached ones."""
        fresh: list[Obj] = list(self.api.list_resource_quotas())
        if versions(fresh) == versions(listed["quotas"]):
            return False
        log.info("quotas changed since the cache last saw them: deciding again")
        listed["quotas"] = fresh
        return True

    def _snapshot(self, listed: dict[str, list[Obj]]) -> Snapshot:
        s = self.settings
        return build_snapshot(
            jobs=listed["jobs"],
            pods=listed["pods"],
            nodes=listed["nodes"],
            quotas=listed["quotas"],
            priority_classes=listed["priority_classes"],
            gang_of=self._gang_of,
            admitted=self.book.admitted,
            not_before=lambda job: requeue_not_before(
                job, s.requeue_backoff_seconds, s.max_requeue_backoff_seconds, parse_time
            ),
            now=datetime.now(UTC),
            requests_of=self._requests_memo(),
            host_ports_of=self._pod_memo(self._host_ports, pod_host_ports),
            topology_levels=s.topology_levels,
            last=self._suspects,
            memo=self._views,
            tally=self._tally,
        )

    def _requests_memo(self) -> Callable[[Obj], Resources]:
        """pod_requests of a pod's spec, remembered per pod version across passes."""
        return self._pod_memo(self._requests, pod_requests)

    def _pod_memo(
        self, memo: dict[tuple[object, object], T], compute: Callable[[Obj], T]
    ) -> Callable[[Obj], T]:
        """compute() of a pod's spec, remembered in `memo` per pod version (a pod's spec
        changes only with a new version) for the pods of the last pass."""
        old = dict(memo)
        memo.clear()

        def of(pod: Obj) -> T:
            meta = pod.get("metadata") or {}
            key = (meta.get("uid"), meta.get("resourceVersion"))
            if key[0] is None or key[1] is None:
                return compute(pod.get("spec") or {})
            if key in memo:
                return memo[key]
            found = old[key] if key in old else compute(pod.get("spec") or {})
            memo[key] = found
            return found

        return of

    def _gang_of(self, job: Obj) -> list[GangPod] | None:
        # Building a gang's pod manifests is the costly part of a pass; the gang changes only
        # with the spec (generation), the gang generation (restarts) and, for an elastic
        # job, its size: the maximum while it waits, then the admitted one.
        meta = job["metadata"]
        size = self.book.unwritten_size(job)
        # As gang_pods reads it: no restarts yet and 0 restarts are one gang (the first
        # status write says 0, and a key that moved with it built every gang twice).
        restarts = (job.get("status") or {}).get("restarts") or 0
        # Only an elastic job's gang changes with its admission (builders/job.at_size): a
        # fixed one's is built once, not again when it is admitted.
        sized = (size, elastic_size(job), is_admitted(job)) if is_elastic(job) else None
        key = (meta["uid"], meta.get("generation"), restarts, sized)
        if key not in self._gangs:
            self._gangs[key] = self._build_gang(job, size)
        return self._gangs[key]

    def _build_gang(self, job: Obj, size: int | None = None) -> list[GangPod] | None:
        """The gang's pods, or None (not admitted) for a job they cannot be built for: one
        hostile or broken job must not stop every pass. Its reconcile marks it."""
        if too_deep_path(job, self.settings.max_object_depth) is not None:
            return None
        try:
            return gang_pods(job, self.settings, size)
        except Exception as exc:
            meta = job.get("metadata") or {}
            log.warning("admission: skipping %s/%s, its pods cannot be built: %r",
                        meta.get("namespace"), meta.get("name"), exc)  # fmt: skip
            return None

    def _observe(self, snapshot: Snapshot, decisions: Decisions, seconds: float) -> None:
        self.metrics.admission_pass_seconds.observe(seconds)
        queued: dict[str, int] = {}
        gpus: dict[str, int] = {}
        newly = set(decisions.admitted)
        for job in snapshot.jobs:
            if job.admitted or job.uid in newly:
                gpus[job.namespace] = gpus.get(job.namespace, 0) + gpu_units(job.need)
            else:
                queued[job.namespace] = queued.get(job.namespace, 0) + 1
        self.metrics.set_admission_state(queued, gpus)
        # An elastic job that may grow waits too: for its cooldown to pass (timer passes).
        self._nothing_waits = not queued and not decisions.growable
        self.metrics.preemptions.inc(len(decisions.preempt))
