"""One idempotent reconcile per job: observe -> plan (pure) -> apply.

Reading top to bottom: fetch the job and its children, return if it is gone, let the pure
planner (lifecycle.plan) decide what should exist and what the status is, create what is
missing, delete what must go, patch the status only when it changed, record events for
transitions, and tell the queue when to look again. Every step is safe to repeat, so an
operator restart at any moment loses nothing and creates no duplicates (children have
deterministic names; a create that finds the object already there is a no-op).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dtjob_api.spec import DNS1123_SUBDOMAIN
from dtjob_api.status import TERMINAL_PHASES, JobPhase
from dtjob_operator import lifecycle
from dtjob_operator.admission.router import AdmissionRouter
from dtjob_operator.admission.seam import AdmissionBackend, AdmissionVerdict
from dtjob_operator.api_client import NotLeaderError, is_transport_error
from dtjob_operator.caches import Caches
from dtjob_operator.children import ChildCreator
from dtjob_operator.constants import (
    CONDITION_ADMITTED,
    EVENT_WARNING,
    KUEUE_QUEUE_LABEL,
    REASON_INVALID_SPEC,
    REASON_NODE_AVOIDED,
    REASON_RECONCILE_ERROR,
    REASON_STALLED,
)
from dtjob_operator.dispatched import DispatchedJobs
from dtjob_operator.health import Heartbeats
from dtjob_operator.job_metrics import STRAGGLER_FIELD
from dtjob_operator.k8s import KubeApi, Obj
from dtjob_operator.kill_points import AFTER_ADMISSION_WRITTEN, KillPoints
from dtjob_operator.kubehttp import ApiException
from dtjob_operator.kueue.multikueue import dispatched
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.pod_reads import PodReads
from dtjob_operator.policies.ownership import owned_by
from dtjob_operator.policies.pods import name_of
from dtjob_operator.policies.stall_blame import straggler_slowdown
from dtjob_operator.policies.too_deep import too_deep_message, too_deep_path, too_deep_status
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.stall_stacks import keep_stall_stacks
from dtjob_operator.status import admitted_condition, admitted_in, read_progress, status_patch
from dtjob_operator.suspects import REASON_SUSPECT, SuspectNodes
from dtjob_operator.workqueue import WorkQueue

log = logging.getLogger(__name__)
JobKey = tuple[str, str]  # (namespace, name)

# How soon a replica that does not lead looks at a key again (it drops nothing: when it
# becomes the leader every key is still, or again, in its queue).
NOT_LEADER_RETRY = 2.0

# Retry delays after an API error: short first (a conflict usually clears at once), capped
# so a broken job is retried every few minutes rather than hammering the API server.
ERROR_BACKOFF_BASE = 0.5
ERROR_BACKOFF_MAX = 300.0
# While the API server cannot be reached, a retry costs one refused connect: retry often, so
# that jobs move again within seconds of it coming back.
UNREACHABLE_BACKOFF_MAX = 5.0


def checkpoint_claim_name(job: Obj) -> str | None:
    """spec.checkpoint.claimName when the job names a claim that could exist. Any shape is
    tolerated (a cluster whose CRD lacks the schema stores anything): an invalid spec is the
    planner's to report, and a name that is no object name is not worth an API call."""
    checkpoint = (job.get("spec") or {}).get("checkpoint")
    name = checkpoint.get("claimName") if isinstance(checkpoint, dict) else None
    if isinstance(name, str) and len(name) <= 253 and re.fullmatch(DNS1123_SUBDOMAIN, name):
        return name
    return None


def next_look(requeue_after: float | None, reads_unwatched: bool, resync: float) -> float | None:
    """When to look at a job again: the planner's answer, but within `resync` for a job whose
    answer depends on something read, not watched: a checkpoint claim (lost or bound
    meanwhile), or the Events of pods waiting in ContainerCreating (FailedMount is said only
    there). The planner's floor for an active job (settings.progress_sync_seconds) trusts
    the watches of its pods and progress ConfigMap."""
    if reads_unwatched and requeue_after is not None:
        return min(requeue_after, resync)
    return requeue_after


class Reconciler:
    """Applies lifecycle plans for jobs taken off the work queue."""

    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        metrics: OperatorMetrics,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.api = api
        self.settings = settings
        self.metrics = metrics
        self.is_leader = is_leader
        self.queue = WorkQueue()
        self.heartbeats = Heartbeats()
        self.kill_points = KillPoints(settings.test_kill_at)  # tests only; off by default
        # Until (and unless: settings.informers) the caches are filled, reads go live.
        self.caches = Caches(api, settings, self.queue.add, lambda: self.request_admission())
        # Who admits each job (built-in, Kueue, external): admission/router.py.
        self.admission = AdmissionRouter(
            api, settings, metrics, self.queue.add, is_leader, self.caches
        )
        # Jobs MultiKueue runs on other clusters (on a manager): their Workloads alone.
        self.dispatched = DispatchedJobs(api, self.admission)
        self._failures: dict[JobKey, int] = {}
        # The identity of each job being reconciled, to attach a Warning event to a job
        # whose reconcile failed in a way we did not foresee.
        self._seen: dict[JobKey, Obj] = {}
        self._threads: list[threading.Thread] = []
        # Shared by all reconcile workers for the per-pod API calls of one gang.
        self._pool = ThreadPoolExecutor(max_workers=settings.api_concurrency)
        self.children = ChildCreator(
            api, metrics, self._pool, self.kill_points, self.caches.created_pod
        )
        self.pod_reads = PodReads(api, self.caches, self._pool)
        # Nodes every job keeps off: several jobs' restarts pointed at them (suspects.py).
        self.suspects = SuspectNodes(
            settings.suspect_node_jobs,
            lambda: self.caches.list_jobs(settings.namespaces or None),
            self.caches.list_nodes,
            lambda node, said: api.emit_node_event(node, "Warning", REASON_SUSPECT, said),
            metrics.suspect_nodes.set,
            api.taint_suspect_node if settings.taint_suspect_nodes else None,
        )

    # -- worker threads ---------------------------------------------------------------

    def start(self, workers: int) -> None:
        """Start the caches and `workers` threads that drain the queue."""
        if self.settings.informers:
            self.caches.start()
        for i in range(workers):
            t = threading.Thread(target=self._work, name=f"reconcile-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        self.heartbeats.workers_started()
        self.admission.start()

    def request_admission(self) -> None:
        """Something that can change admission happened (e.g. a quota changed)."""
        self.admission.request()

    def enqueue_all(self) -> None:
        """Look at every job again (a replica that has just become the leader)."""
        for job in self.api.list_jobs(self.settings.namespaces or None):
            self.queue.add((job["metadata"]["namespace"], job["metadata"]["name"]))
        self.request_admission()

    def on_api_recovered(self, down_seconds: float) -> None:
        """The API server answers again after calls failed to reach it: retry every job now
        (re-listed, so none waits out an error backoff or depends on a missed event)."""
        log.warning("API server reachable again after %.1fs; looking at every job", down_seconds)
        self._failures.clear()
        self.caches.relist()
        try:
            self.enqueue_all()
        except Exception as exc:  # the next recovery or the watches will catch up
            log.warning("re-listing jobs after the API server came back failed: %s", exc)

    def on_lost_leadership(self) -> None:
        """Another replica may now admit: verdicts of our passes no longer hold."""
        self.admission.clear()

    def stop(self) -> None:
        """Stop the worker threads (after their current reconcile)."""
        self.heartbeats.workers_stopped()
        self.queue.shutdown()
        self.admission.stop()
        for t in self._threads:
            t.join(timeout=30)
        self._threads.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.caches.stop()

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            assert isinstance(key, tuple)
            try:
                if not self.is_leader():
                    self.queue.add_after(key, NOT_LEADER_RETRY)
                    continue
                self.heartbeats.started("/".join(key))
                self._reconcile_and_requeue(key)
            except NotLeaderError:
                # Leadership lost in the middle of a reconcile: the write was refused before
                # it left; the new leader (or we, again) will redo the whole pass.
                self.queue.add_after(key, NOT_LEADER_RETRY)
            finally:
                self.heartbeats.finished()
                self.queue.done(key)

    def _reconcile_and_requeue(self, key: JobKey) -> None:
        started = time.monotonic()
        try:
            requeue_after = self.reconcile(key)
        except NotLeaderError:
            raise
        except Exception as exc:
            self.metrics.reconcile_errors.inc()
            requeue_after = self._after_error(key, exc)
        else:
            self._failures.pop(key, None)
        finally:
            elapsed = time.monotonic() - started
            self.metrics.reconcile_seconds.observe(elapsed)
            log.debug("reconciled %s/%s in %.3fs", *key, elapsed)
        if requeue_after is not None:
            self.queue.add_after(key, requeue_after)

    def _after_error(self, key: JobKey, exc: Exception) -> float:
        """Log a failed reconcile and say when to retry it."""
        first = key not in self._failures
        delay = self._error_backoff(key)
        if is_transport_error(exc):
            delay = min(UNREACHABLE_BACKOFF_MAX, delay)
            log.warning("reconcile %s/%s: API server unreachable (%s); retrying in %.1fs",
                        *key, type(exc).__name__, delay)  # fmt: skip
        elif isinstance(exc, ApiException):
            log.warning("reconcile %s/%s: API error %s %s; retrying in %.1fs",
                        *key, exc.status, exc.reason, delay)  # fmt: skip
        else:
            # Something about this one job we did not foresee (or a bug): it must not stop
            # the others, and its owner should see it without reading the operator's log.
            log.error("reconcile %s/%s failed; retrying in %.1fs", *key, delay, exc_info=exc)
            job = self._seen.get(key)
            if first and job is not None:
                message = f"the operator could not reconcile this job: {type(exc).__name__}"
                self._try_event(job, EVENT_WARNING, REASON_RECONCILE_ERROR,
                                f"{message}: {str(exc)[:300]}; retrying with backoff")  # fmt: skip
        return delay

    def _try_event(self, job: Obj, event_type: str, reason: str, message: str) -> None:
        try:
            self.api.emit_event(job, event_type, reason, message)
        except Exception as exc:  # NotLeaderError, or the API server gone meanwhile
            log.warning("could not record event %s: %s", reason, exc)

    def _error_backoff(self, key: JobKey) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        return float(min(ERROR_BACKOFF_MAX, ERROR_BACKOFF_BASE * 2**n))

    # -- the reconcile ----------------------------------------------------------------

    def reconcile(self, key: JobKey) -> float | None:
        """Bring one job one step closer to its desired state; returns when to look again."""
        namespace, name = key
        job = self.caches.get_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            self._forget(key, job)
            return None
        if self.caches.namespace_terminating(namespace):
            # The namespace controller deletes its pods, then the job: a pass now would
            # mourn the pods with a gang restart and create them again, which the API
            # server refuses there (403 NamespaceTerminating). The job's deletion wakes it.
            return None
        uid = job["metadata"]["uid"]
        self._seen[key] = {"metadata": {"name": name, "namespace": namespace, "uid": uid}}
        path = too_deep_path(job, self.settings.max_object_depth)
        if path is not None:
            self._fail_too_deep(job, path)
            return None
        if dispatched(job):  # MultiKueue runs it on a worker; the manager only queues it
            self.dispatched.reconcile(job)
            return self.settings.resync_seconds
        pods = [p for p in self.caches.job_pods_of(namespace, name, uid) if owned_by(p, uid)]
        config_maps = [
            c for c in self.caches.job_config_maps_of(namespace, name) if owned_by(c, uid)
        ]
        existing = {("ConfigMap", c["metadata"]["name"]) for c in config_maps}
        existing |= self.children.ensured(uid)

        # Who admits the job answers; a finished job is past admission (the planner keeps
        # its final status), but its backend still hears of it (a Workload is Finished).
        backend = self.admission.route(job)
        terminal = (job.get("status") or {}).get("phase") in TERMINAL_PHASES
        verdict = AdmissionVerdict(by=backend.name) if terminal else backend.view(job, pods)
        # Read only when named: most jobs have no claim, and the get costs a round trip.
        claim_name = checkpoint_claim_name(job)
        gone = self.pod_reads.vanished(job, pods)
        observed = lifecycle.Observed(
            job=job,
            pods=pods,
            gone_pods=gone,
            lost_nodes=self.pod_reads.lost_nodes(job, pods, gone),
            children=existing,
            progress=read_progress(name, config_maps),
            now=datetime.now(UTC),
            checkpoint_claim=self.api.get_pvc(namespace, claim_name) if claim_name else None,
            pod_events=self.pod_reads.events(job, pods),
            admission=verdict,
            suspect_nodes=self.suspects.current(),
        )
        plan = lifecycle.plan(observed, self.settings)

        old_status = job.get("status") or {}
        writes_pods = bool(
            plan.delete_pods
            or plan.force_delete_pods
            or any(obj["kind"] == "Pod" for obj in plan.create)
        )
        if writes_pods:  # what this pass writes, its next reads must see (caches.py)
            self.caches.wrote_pods(uid)
        written = self._record_admission_first(job, old_status, plan, backend)
        refused = self.children.create(plan, job)
        if refused is not None and refused.namespace_terminating:
            return None  # the cache had not seen the namespace go yet: as above
        retry_after: float | None = None
        if refused is not None:
            # The planner decides what a refusal means for the job (Failed/InvalidSpec, or
            # a condition while we retry); its creates were just tried, so none are redone.
            # From the status as stored now (Admitted=True may have been written first).
            again = replace(observed, job={**job, "status": written}, create_error=refused)
            plan = lifecycle.plan(again, self.settings)
            if not refused.permanent:
                retry_after = self.children.backoff(uid)
        else:
            self.children.created(uid)
        stall = next((e for e in plan.events if e.reason == REASON_STALLED), None)
        if stall is not None and plan.delete_pods:  # before the pods and their logs go
            keep_stall_stacks(self.api, self._pool, job, pods, observed.progress, stall.message)
        if plan.delete_pods:
            log.info("deleting pods of %s/%s: %s", namespace, name, ", ".join(plan.delete_pods))
        grace = plan.delete_grace_seconds

        if (plan.delete_pods or plan.force_delete_pods) and not writes_pods:
            self.caches.wrote_pods(uid)  # a plan made again after a refusal may delete
            writes_pods = True
        pod_uids = {name_of(p): (p.get("metadata") or {}).get("uid") for p in pods}

        def delete(pod: str, grace_seconds: int | None) -> None:
            self.api.delete_pod(namespace, pod, grace_seconds)
            self.caches.deleted_pod(uid, pod, pod_uids.get(pod))

        list(self._pool.map(lambda pod: delete(pod, grace), plan.delete_pods))
        for pod in plan.force_delete_pods:
            log.info("force-deleting pod %s/%s: terminating on a lost node", namespace, pod)
            delete(pod, 0)
        if writes_pods:
            self.caches.writes_done(uid)
        if plan.delete_job:
            self.api.delete_job(namespace, name)
            self._forget(key, job)
            return None

        if plan.status != written:
            self._patch_status(namespace, name, status_patch(written, plan.status))
            if plan.status.get("restarts", 0) > old_status.get("restarts", 0):
                self.metrics.restarts.labels(namespace=namespace).inc()
                if any(e.reason == REASON_STALLED for e in plan.events):
                    self.metrics.stalls.labels(namespace=namespace).inc()
                avoided = plan.status.get("avoidedNodes") or []
                if avoided and any(e.reason == REASON_NODE_AVOIDED for e in plan.events):
                    node = str(avoided[-1]["node"])  # the one named now (node_blame.avoid)
                    self.metrics.node_avoidances.labels(namespace=namespace, node=node).inc()
                    self.suspects.renew()  # the cache reads this replica's own write
        if plan.gpu_seconds:
            queue = ((job.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL, "")
            for bucket, seconds in plan.gpu_seconds.items():
                self.metrics.gpu_seconds.labels(namespace, queue, bucket).inc(seconds)
        self.admission.after(backend, job, written, plan.status, bool(plan.delete_pods))
        for event in plan.events:
            self.api.emit_event(job, event.type, event.reason, event.message)
        self.metrics.observe_phase(key, plan.status.get("phase"))
        progress = dict(plan.status.get("progress") or {})
        if (slowdown := straggler_slowdown(observed.progress)) is not None:
            progress[STRAGGLER_FIELD] = slowdown
        self.metrics.job_progress.observe(key, plan.status.get("phase"), progress)
        if retry_after is not None:
            return retry_after
        unwatched = bool(claim_name) or bool(observed.pod_events)
        return next_look(plan.requeue_after, unwatched, self.settings.resync_seconds)

    def _record_admission_first(
        self, job: Obj, old: dict[str, Any], plan: lifecycle.Plan, backend: AdmissionBackend
    ) -> dict[str, Any]:
        """A pass that admits a job and creates its pods writes Admitted=True first (the
        conditions only; the phase follows once the pods exist). An operator killed between
        the two then restarts with a job its status calls admitted, which its AdmissionBook
        re-derives, and creates the rest of the gang; never a Queued job holding a partial
        gang. (Not the phase too, in one write: a Starting job's missing members count as
        lost, and the next life would restart a gang that was never created.) Returns the
        status as now stored."""
        creates_pods = any(obj["kind"] == "Pod" for obj in plan.create)
        if not creates_pods or admitted_in(old) or not admitted_in(plan.status):
            return old
        conditions = plan.status.get("conditions") or []
        admitted = [c for c in conditions if c.get("type") == CONDITION_ADMITTED]
        others = [c for c in old.get("conditions") or [] if c.get("type") != CONDITION_ADMITTED]
        written = dict(old, conditions=others + admitted)
        meta = job["metadata"]
        self._patch_status(meta["namespace"], meta["name"], {"conditions": written["conditions"]})
        self.kill_points.reached(AFTER_ADMISSION_WRITTEN)
        backend.admitted(job, old, admitted_condition(written).get("message"))
        return written

    def _patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Write the status; the job cache is not trusted for this job until it has seen
        this write (caches.py)."""
        try:
            version = self.api.patch_status(namespace, name, patch)
        except Exception:
            # It may have been written all the same (a timeout): read it live next time.
            self.caches.wrote_job(namespace, name, None)
            raise
        self.caches.wrote_job(namespace, name, version)

    def _fail_too_deep(self, job: Obj, path: str) -> None:
        """Mark a job too deeply nested to plan as Failed (InvalidSpec), once, and skip it.

        Its children are never created (planning is what it cannot go through), so there is
        nothing to stop; deleting the job is all that is left for its owner to do."""
        meta, old = job["metadata"], job.get("status") or {}
        if old.get("phase") == JobPhase.FAILED.value:
            return
        limit = self.settings.max_object_depth
        message = too_deep_message(path, limit)
        new = too_deep_status(old, message, datetime.now(UTC), meta.get("generation"))
        self._patch_status(meta["namespace"], meta["name"], status_patch(old, new))
        self._try_event(job, EVENT_WARNING, REASON_INVALID_SPEC, message)
        log.warning("job %s/%s is nested too deeply to plan: %s", meta["namespace"],
                    meta["name"], path[:200])  # fmt: skip

    def _forget(self, key: JobKey, job: Obj | None) -> None:
        self.metrics.observe_phase(key, None)
        self.metrics.job_progress.observe(key, None, None)
        self._failures.pop(key, None)
        self._seen.pop(key, None)
        if job is not None:
            self.children.forget(job["metadata"]["uid"])
            self.dispatched.forget(job["metadata"]["uid"])
        self.caches.forget(job["metadata"]["uid"] if job is not None else None, key)
        self.admission.forget(key, job)  # its reservation, its Workload
