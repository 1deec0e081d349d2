"""The admission's side effects: gather a snapshot, run a pass, hand out the verdicts.

One thread runs passes, one at a time (decisions are serialised), whenever something that
can change them happens (a job waits, a job stops, a quota changes) and, while a job waits,
at least every `resync_seconds`; bursts of requests share one pass. A pass reads the jobs
(their status holds the admissions, so an operator restart needs no state), unfinished
pods, nodes, ResourceQuotas and PriorityClasses from the watch-backed caches (caches.py);
the first pass of a new leader lists the jobs from the API server.

Verdicts go into the AdmissionBook; the per-job reconcile reads it (admitted? position?
preempted?) and writes the job's status, so the status has one writer. The book also keeps
admissions the reconcile has not written yet, so the next pass counts them as reserved.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from dtjob_api.status import JobPhase
from dtjob_operator.admission.decide import Decisions, Verdict, decide
from dtjob_operator.admission.resources import Resources, gpu_units, pod_requests
from dtjob_operator.admission.snapshot import (
    STARTED_PHASES,
    GangPod,
    Snapshot,
    build_snapshot,
    gang_pods,
    is_admitted,
    requeue_not_before,
)
from dtjob_operator.builders.job import elastic_size
from dtjob_operator.k8s import KubeApi, is_transport_error, versions
from dtjob_operator.kueue.workload import queue_of
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.policies.times import parse_time
from dtjob_operator.policies.too_deep import too_deep_path
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.status import admitted_condition

log = logging.getLogger(__name__)
JobKey = tuple[str, str]
Obj = Mapping[str, Any]


class Reads(Protocol):
    """Where a pass reads jobs, pods, nodes, quotas and classes: the caches, or the API
    server."""

    def list_jobs(self, namespaces: list[str] | None = None) -> Sequence[Obj]: ...
    def list_all_pods(self) -> Sequence[Obj]: ...
    def list_nodes(self) -> Sequence[Obj]: ...
    def list_resource_quotas(self) -> Sequence[Obj]: ...
    def list_priority_classes(self) -> Sequence[Obj]: ...


@dataclass(frozen=True)
class AdmissionView:
    """What the reconcile passes on to the planner for one job."""

    admitted: bool
    message: str = ""
    reason: str = ""
    position: int | None = None
    preempted: str | None = None
    refit_pending: bool = False
    """An admitted gang restarted after a failure that no pass has checked since its old
    pods went: it is created only once one has (decide.py, step 0)."""
    placements: Mapping[str, str] = field(default_factory=dict)
    """pod name -> the node a pass placed it on: it is created pinned there."""
    domain: str | None = None
    """Where the pass that admitted (or refitted) the gang placed it (topology.describe)."""
    size: int | None = None
    """The pods an elastic job was admitted with."""
    resize: tuple[int, str] | None = None
    """A running elastic job to resize: (pods, why)."""


class AdmissionBook:
    """Verdicts of the latest passes by job uid; thread-safe.

    `forget(uid)` drops a job's entries once the reconcile has written what they said is
    over (released, preempted, suspended, finished, deleted). A pass that began before a
    forget does not bring the entries back (epochs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._verdicts: dict[str, Verdict] = {}
        self._preempt: dict[str, Verdict] = {}
        self._release: dict[str, tuple[int, Verdict]] = {}
        self._refit: dict[str, int] = {}
        # uid -> pod name -> node: where passes placed pods not created yet. Kept, so that
        # a later pass reserves them there instead of placing them afresh.
        self._placements: dict[str, dict[str, str]] = {}
        self._domains: dict[str, str] = {}
        self._sizes: dict[str, int] = {}
        self._growable_since: dict[str, datetime] = {}
        self._resize: dict[str, tuple[int, str]] = {}
        self._forgotten: dict[str, int] = {}
        self._epoch = 0
        self._cleared = -1

    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    def record(self, decisions: Decisions, since: int) -> list[str]:
        """Store a pass's verdicts; returns the uids whose verdict changed."""
        changed: list[str] = []
        with self._lock:
            if self._cleared > since:
                return changed
            for uid, verdict in decisions.verdicts.items():
                if self._forgotten.get(uid, -1) > since:
                    continue
                if self._verdicts.get(uid) != verdict:
                    changed.append(uid)
                self._verdicts[uid] = verdict
                if uid in decisions.sizes:
                    self._sizes[uid] = decisions.sizes[uid]
            for uid, verdict in decisions.preempt.items():
                if self._forgotten.get(uid, -1) > since or uid in self._preempt:
                    continue
                self._preempt[uid] = verdict
                changed.append(uid)
            # A release is a judgement of the capacity of now: each pass replaces them all.
            released = {
                uid: (decisions.release_generation.get(uid, 0), verdict)
                for uid, verdict in decisions.release.items()
                if self._forgotten.get(uid, -1) <= since
            }
            changed.extend(u for u in released if self._release.get(u) != released[u])
            self._release = released
            for uid, where in decisions.placements.items():
                if self._forgotten.get(uid, -1) > since:
                    continue
                kept = self._placements.setdefault(uid, {})
                if uid not in changed and any(kept.get(p) != n for p, n in where.items()):
                    changed.append(uid)
                kept.update(where)
                if uid in decisions.domains:
                    self._domains[uid] = decisions.domains[uid]
            now = datetime.now(UTC)
            self._growable_since = {
                uid: self._growable_since.get(uid, now) for uid in decisions.growable
            }
            for uid, resize in decisions.resize.items():
                if self._forgotten.get(uid, -1) <= since and self._resize.get(uid) != resize:
                    self._resize[uid] = resize
                    changed.append(uid)
            for uid, generation in decisions.refit.items():
                if self._forgotten.get(uid, -1) > since or self._refit.get(uid) == generation:
                    continue
                self._refit[uid] = generation
                if uid not in changed:
                    changed.append(uid)
        return changed

    def view(self, job: Obj) -> AdmissionView:
        """Admitted per status or a pass; else the waiting verdict (if any pass saw it)."""
        uid = job["metadata"]["uid"]
        status_admitted = is_admitted(job)
        with self._lock:
            preempt = self._preempt.get(uid)
            verdict = self._verdicts.get(uid)
            release = self._release.get(uid)
            refit = self._refit.get(uid)
        if preempt is not None and status_admitted:
            return AdmissionView(False, preempted=preempt.message)
        if release is not None and _still_unstarted(job, release[0]):
            return AdmissionView(False, release[1].message, release[1].reason)
        with self._lock:
            placed = dict(self._placements.get(uid) or {})
            domain, size = self._domains.get(uid), self._sizes.get(uid)
            resize = self._resize.get(uid)
        if resize is not None and elastic_size(job) == resize[0]:
            resize = None  # done: the status has the new size
        if status_admitted and _awaits_refit(job, refit):
            return AdmissionView(True, refit_pending=True, placements=placed, domain=domain,
                                 size=size)  # fmt: skip
        if status_admitted or (verdict is not None and verdict.admit):
            return AdmissionView(True, placements=placed, domain=domain, size=size, resize=resize)
        if verdict is None:
            # No pass has judged it since (this replica started leading, or a release was
            # just written): what its status says still holds. Saying "waiting" meanwhile
            # flipped a released job's condition to WaitingForAdmission and back, with an
            # Event each way.
            prior = admitted_condition(job.get("status") or {})
            if prior.get("status") == "False" and prior.get("reason"):
                position = (job.get("status") or {}).get("queuePosition")
                return AdmissionView(False, prior.get("message") or "", prior["reason"],
                                     position if isinstance(position, int) else None)  # fmt: skip
            return AdmissionView(False, "waiting for the next admission pass")
        return AdmissionView(False, verdict.message, verdict.reason, verdict.position)

    def unwritten_size(self, job: Obj) -> int | None:
        """The size a pass admitted an elastic job at, while its status does not say one:
        until the reconcile writes it, a pass would see the job at its maximum."""
        if elastic_size(job) is not None:
            return None
        uid = job["metadata"]["uid"]
        with self._lock:
            verdict = self._verdicts.get(uid)
            return self._sizes.get(uid) if verdict is not None and verdict.admit else None

    def admitted(self, job: Obj) -> bool:
        """What a pass counts as admitted (a job being preempted no longer is)."""
        uid = job["metadata"]["uid"]
        with self._lock:
            if uid in self._preempt:
                return False
            verdict = self._verdicts.get(uid)
        return is_admitted(job) or (verdict is not None and verdict.admit)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._epoch += 1
            self._forgotten[uid] = self._epoch
            self._verdicts.pop(uid, None)
            self._preempt.pop(uid, None)
            self._release.pop(uid, None)
            self._refit.pop(uid, None)
            self._placements.pop(uid, None)
            self._domains.pop(uid, None)
            self._sizes.pop(uid, None)
            self._growable_since.pop(uid, None)
            self._resize.pop(uid, None)

    def growable_since(self) -> dict[str, datetime]:
        """uid -> since when each elastic job has had room to grow, pass after pass."""
        with self._lock:
            return dict(self._growable_since)

    def kept_placements(self) -> dict[str, dict[str, str]]:
        """uid -> pod name -> node of the placements given so far (a copy)."""
        with self._lock:
            return {uid: dict(where) for uid, where in self._placements.items()}

    def clear(self) -> None:
        """Drop every verdict (this replica stopped leading: another one admits now, and a
        verdict of ours may be stale when we lead again). Passes begun before it count as
        forgotten for every job."""
        with self._lock:
            self._epoch += 1
            self._cleared = self._epoch
            self._verdicts.clear()
            self._preempt.clear()
            self._release.clear()
            self._refit.clear()
            self._placements.clear()
            self._domains.clear()
            self._sizes.clear()
            self._growable_since.clear()
            self._resize.clear()

    def __contains__(self, uid: object) -> bool:
        with self._lock:
            return uid in self._verdicts or uid in self._preempt

    def __len__(self) -> int:
        with self._lock:
            return len(self._verdicts) + len(self._preempt)


def _still_unstarted(job: Obj, generation: int) -> bool:
    """A release applies only to the gang generation it was decided for, before its pods
    were created (the reconcile may have created them since the pass listed)."""
    status = job.get("status") or {}
    return int(status.get("restarts") or 0) == generation and status.get("phase") not in (
        STARTED_PHASES
    )


def _awaits_refit(job: Obj, checked: int | None) -> bool:
    """A gang restarted after a failure keeps its admission, but what it held may be gone
    meanwhile (its node cordoned or lost, the quota lowered): it waits until a pass has
    checked its generation against what is free now. Without this, the reconcile woken by
    the last old pod's deletion created the new gang before any pass ran, and it hung in
    Pending pods instead of waiting in the queue."""
    status = job.get("status") or {}
    generation = int(status.get("restarts") or 0)
    return (
        status.get("phase") == JobPhase.RESTARTING.value
        and generation > 0
        and (checked != generation)
    )


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
    ) -> None:
        self.api = api
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
        # Pod requests by (uid, resourceVersion): a pod's requests change only with a new
        # version; kept for the pods of the last pass.
        self._requests: dict[tuple[object, object], Resources] = {}
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
        """What earlier passes decided that this one builds on: placements given, and
        since when elastic jobs could grow."""
        return replace(snapshot, kept=self.book.kept_placements(),
                       growable_since=self.book.growable_since())  # fmt: skip

    def gather(self) -> Snapshot:
        """List what the pass reads and fold it into a Snapshot."""
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
        jobs = list(self.api.list_jobs(namespaces) if fresh else self.reads.list_jobs(namespaces))
        # A job in a Kueue LocalQueue is Kueue's to admit (kueue/backend.py); its pods still
        # count on the nodes and in the quotas like anyone's.
        jobs = [j for j in jobs if queue_of(j) is None]
        live = {j["metadata"]["uid"] for j in jobs}
        self._gangs = {k: v for k, v in self._gangs.items() if k[0] in live}
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
            topology_levels=s.topology_levels,
        )

    def _requests_memo(self) -> Callable[[Obj], Resources]:
        """pod_requests of a pod's spec, remembered per pod version across passes."""
        old, self._requests = self._requests, {}

        def requests_of(pod: Obj) -> Resources:
            meta = pod.get("metadata") or {}
            key = (meta.get("uid"), meta.get("resourceVersion"))
            if key[0] is None or key[1] is None:
                return pod_requests(pod.get("spec") or {})
            found = self._requests.get(key) or old.get(key)
            if found is None:
                found = pod_requests(pod.get("spec") or {})
            self._requests[key] = found
            return found

        return requests_of

    def _gang_of(self, job: Obj) -> list[GangPod] | None:
        # Building a gang's pod manifests is the costly part of a pass; the gang changes only
        # with the spec (generation), the gang generation (restarts) and, for an elastic
        # job, its size: the maximum while it waits, then the admitted one.
        meta = job["metadata"]
        size = self.book.unwritten_size(job)
        restarts = (job.get("status") or {}).get("restarts")
        sized = (size, elastic_size(job), is_admitted(job))
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
