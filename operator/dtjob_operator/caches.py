"""What the operator reads, from watch-backed caches (informers) instead of lists per pass.

- The jobs (the reconcile's read; their changes wake the reconciles: kopf watches nothing
  while the caches are on, handlers.py).
- The pods and ConfigMaps the operator owns: label-selected on the server
  (`dtjob.io/job-name`), indexed by job; a change wakes that job's reconcile. Of the loss
  history ConfigMaps only the metadata is kept, and their updates wake nothing: the
  operator never reads them, and keeping them would cost a 512-row curve per job.
- Every unfinished pod of the cluster (what holds node and quota room), trimmed to the
  fields the admission reads (names, labels, owners, node, requests, phase). Watching all
  namespaces, the jobs' own pods are in the job-pods cache already: this one then selects
  only the other pods (`!dtjob.io/job-name`), so no pod is held twice (with 1,000 jobs x
  8 pods, the second copy was some 20 MiB; bench/api_load.py).
- Nodes (without their image lists), ResourceQuotas (a change asks for an admission pass)
  and PriorityClasses.
- Namespaces, for one bit: is it being deleted (reconcile.py leaves such a namespace's jobs
  alone: its pods go first, and a gang restarted there would be refused).
- The last state of the jobs' pods the watch saw deleted, for ten minutes or until their
  job is deleted (gone_pods.py): a member force-deleted off a dead node is judged by the
  node it ran on.

Read-your-writes. A cache lags the API server by the watch's latency, and a pod the
reconcile has just created or deleted may not be in it yet; a planner that saw a created
pod missing would create it again, one that saw a deleted pod still there would wait. So
after a reconcile writes pods, the job is marked unsettled: its next reconciles list its
pods from the API server and compare them with the cache, and the cache is trusted again
for that job once both agree (client-go's controllers keep "expectations" for the same
reason). Likewise a job whose status the reconcile wrote is read from the API server until
the cache holds the resourceVersion that write returned. Until a cache has made its first
list, every read goes to the API server.

The informers themselves (what each watches, keeps and wakes) are built in
cache_informers.py.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from dtjob_operator.cache_informers import (
    CACHE_CALLS,
    FINISHED_PHASES,
    build_informers,
    jobs_pods_hold_capacity,
    workload_informers,
)
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.gone_pods import GonePods
from dtjob_operator.informer import Informer
from dtjob_operator.k8s import KubeApi, Obj, versions
from dtjob_operator.kueue.api import KueueApi
from dtjob_operator.pod_expectations import PodExpectations
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.trims import trim_job_pod, trim_node, trim_pod_for_capacity

__all__ = ["CACHE_CALLS", "Caches", "trim_job_pod", "trim_node", "trim_pod_for_capacity"]

log = logging.getLogger(__name__)

JobKey = tuple[str, str]

# How often a Kueue job's reconcile may look for Kueue's API when it was not served at start.
WORKLOADS_PROBE_SECONDS = 60.0


class Caches:
    """The informers and the reads the reconcile and the admission make through them.

    Nothing is watched before start() (nor ever with settings.informers off): until an
    informer has made its first list, reads through it go to the API server."""

    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        on_job_child: Callable[[JobKey], None],
        on_capacity: Callable[[], None],
    ) -> None:
        self.api = api
        self.settings = settings
        self.on_job_child = on_job_child
        self.on_capacity = on_capacity
        self.jobs: list[Informer] = []
        self.job_pods: list[Informer] = []
        self.job_config_maps: list[Informer] = []
        self.unfinished_pods: Informer | None = None
        self.nodes: Informer | None = None
        self.quotas: Informer | None = None
        self.priority_classes: Informer | None = None
        self.namespaces: Informer | None = None
        self.workloads: list[Informer] = []
        self._workload_options: dict[str, Any] = {}  # set once the informers are built
        self._workloads_probed = float("-inf")
        # Jobs whose pods this replica wrote, with what the cache must show before it is
        # read again (pod_expectations.py).
        self._unsettled: dict[str, PodExpectations] = {}
        self._written_jobs: dict[JobKey, str | None] = {}
        self._current_uids: dict[JobKey, str | None] = {}
        self.gone_pods = GonePods()
        self._lock = threading.Lock()

    def _build(self) -> None:
        built = build_informers(self.api.api_client, self.settings, self)
        self.jobs, self.job_pods, self.job_config_maps = (
            built.jobs,
            built.job_pods,
            built.job_config_maps,
        )
        self.unfinished_pods, self.nodes, self.quotas = (
            built.unfinished_pods,
            built.nodes,
            built.quotas,
        )
        self.priority_classes, self.namespaces = built.priority_classes, built.namespaces
        self._workload_options = built.workload_options

    def watch_workloads_if_served(self) -> None:
        """Kueue's Workloads are watched from the first reconcile of a Kueue job that finds
        their API served (looked for at most once a minute: Kueue may be installed, or the
        API server reachable again, later)."""
        if self.workloads or not self._workload_options:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._workloads_probed < WORKLOADS_PROBE_SECONDS:
                return
            self._workloads_probed = now
        informers = workload_informers(
            self.api.api_client, self.settings.namespaces, self._workload_options
        )
        with self._lock:
            if self.workloads or not informers:
                return
            self.workloads = informers
        for informer in informers:
            informer.start()

    @property
    def jobs_pods_hold_capacity(self) -> bool:
        """Whether the job-pods cache is where the admission finds the jobs' own pods
        (cache_informers.jobs_pods_hold_capacity)."""
        return jobs_pods_hold_capacity(self.settings)

    @property
    def informers(self) -> list[Informer]:
        one = (self.unfinished_pods, self.nodes, self.quotas, self.priority_classes,
               self.namespaces)  # fmt: skip
        return [*self.jobs, *self.job_pods, *self.job_config_maps, *self.workloads,
                *(i for i in one if i is not None)]  # fmt: skip

    def start(self) -> None:
        self._build()
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def relist(self) -> None:
        """Every cache listed afresh (after an API server outage: Informer.relist)."""
        for informer in self.informers:
            informer.relist()

    def synced(self) -> bool:
        return bool(self.informers) and all(i.synced.is_set() for i in self.informers)

    # -- the reconcile's reads ----------------------------------------------------------

    def get_job(self, namespace: str, name: str) -> Obj | None:
        """The job (a copy: the reconcile may build on it). From the API server while the
        cache has not seen the reconcile's last status write, and when the cache does not
        have it (a job just created may not be there yet; a deleted one is confirmed)."""
        informer = self._scope(self.jobs, namespace)
        key = (namespace, name)
        cached = informer.get(namespace, name) if informer and informer.synced.is_set() else None
        if cached is not None:
            with self._lock:
                written = self._written_jobs.get(key, _rv_of(cached))
                if written == _rv_of(cached):
                    self._written_jobs.pop(key, None)  # the cache has seen our last write
                # Deleted, or another incarnation since, per another watch (saw_job): not
                # this one.
                current = self._current_uids.get(key, _uid_of(cached))
                settled = written == _rv_of(cached) and current == _uid_of(cached)
            if settled:
                return copy.deepcopy(cached)
        live = self.api.get_job(namespace, name)
        with self._lock:
            if key in self._written_jobs:  # what the cache must reach (a failed write: unknown)
                self._written_jobs[key] = _rv_of(live) if live is not None else None
        return live

    def saw_job(self, namespace: str, name: str, uid: str | None) -> None:
        """Another watch (kopf's, with the caches off) saw the job named so with this uid
        (None: deleted). Until the cache holds that incarnation, the job is read from the
        API server."""
        with self._lock:
            self._current_uids[(namespace, name)] = uid

    def wrote_job(self, namespace: str, name: str, resource_version: str | None) -> None:
        """The reconcile wrote the job's status, which is at `resource_version` now."""
        with self._lock:
            self._written_jobs[(namespace, name)] = resource_version

    def wrote_pods(self, uid: str) -> None:
        """The reconcile is about to create or delete pods of job `uid`: until it says what
        became of them (created, deleted, writes_done) and the cache shows that, or a live
        read agrees with the cache, they are read live."""
        with self._lock:
            self._unsettled.setdefault(uid, PodExpectations()).pending += 1

    def created_pod(self, uid: str, name: str, pod_uid: str | None) -> None:
        """Job `uid`'s pod `name` exists now as `pod_uid` (None: not known which)."""
        with self._lock:
            if (expected := self._unsettled.get(uid)) is not None:
                expected.created(name, pod_uid)

    def deleted_pod(self, uid: str, name: str, pod_uid: str | None) -> None:
        """Job `uid`'s pod `name` (`pod_uid`) was deleted (or was already gone)."""
        with self._lock:
            if (expected := self._unsettled.get(uid)) is not None:
                expected.deleted(name, pod_uid)

    def writes_done(self, uid: str) -> None:
        """Every pod write of the pass was answered and reported; a pass that raised
        before this leaves the job to live reads until one agrees with the cache."""
        with self._lock:
            if (expected := self._unsettled.get(uid)) is not None:
                expected.pending -= 1

    def note_gone(self, kind: str, obj: Obj) -> None:
        """A job pod's watch event: the last state of a deleted one is kept (gone_pods.py)."""
        meta = obj.get("metadata") or {}
        job = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
        if kind == "DELETED" and job and not self._job_deleted(str(meta.get("namespace")), job):
            self.gone_pods.record(str(job), obj)

    def _job_deleted(self, namespace: str, name: str) -> bool:
        """The jobs' cache has seen the job deleted or being deleted (its pods go with it,
        and nothing will judge them); without that cache, not known."""
        informer = self._scope(self.jobs, namespace)
        if informer is None or not informer.synced.is_set():
            return False
        cached = informer.get(namespace, name)
        return cached is None or bool(cached["metadata"].get("deletionTimestamp"))

    def forget(self, uid: str | None, key: JobKey) -> None:
        """The job is gone or finished with: nothing of it to keep track of."""
        self.gone_pods.forget(*key)  # the reconcile forgets only a deleted job
        with self._lock:
            self._unsettled.pop(uid or "", None)
            self._written_jobs.pop(key, None)
            if self._current_uids.get(key) is None:  # deleted: forget the name
                self._current_uids.pop(key, None)

    def job_pods_of(self, namespace: str, job_name: str, uid: str) -> list[Obj]:
        informer = self._scope(self.job_pods, namespace)
        synced = informer is not None and informer.synced.is_set()
        cached = informer.indexed(namespace, job_name) if informer is not None and synced else []
        with self._lock:
            expected = self._unsettled.get(uid)
            if synced and expected is not None and expected.met_by(cached):
                del self._unsettled[uid]  # the watch has brought what the writes did
                expected = None
        if informer is not None and synced and expected is None:
            return cached
        live = self.api.list_pods(namespace, job_name)
        if informer is not None and expected is not None and _same(live, informer.indexed(
            namespace, job_name
        )):  # fmt: skip
            with self._lock:  # the cache is as current as the API server for this job
                if self._unsettled.get(uid) is expected:
                    del self._unsettled[uid]
        return live

    def job_config_maps_of(self, namespace: str, job_name: str) -> list[Obj]:
        informer = self._scope(self.job_config_maps, namespace)
        if informer is None or not informer.synced.is_set():
            return self.api.list_config_maps(namespace, job_name)
        return informer.indexed(namespace, job_name)

    def list_nodes(self) -> list[Obj]:
        return _read(self.nodes, self.api.list_nodes)

    def workloads_of(self, namespace: str, job_name: str) -> list[Obj]:
        """Kueue's Workloads labelled with the job's name (metadata only from the watch)."""
        informer = self._scope(self.workloads, namespace)
        if informer is None or not informer.synced.is_set():
            return KueueApi(self.api.api_client).list_job_workloads(namespace, job_name)
        return informer.indexed(namespace, job_name)

    def namespace_terminating(self, namespace: str) -> bool:
        """`namespace` is being deleted, as the cache has it (False before its first list:
        the reconcile then goes on as before, and a create refused there says so)."""
        informer = self.namespaces
        found = informer.get("", namespace) if informer and informer.synced.is_set() else None
        if found is None:
            return False
        deleting = (found.get("metadata") or {}).get("deletionTimestamp")
        return bool(deleting) or (found.get("status") or {}).get("phase") == "Terminating"

    # -- the admission's reads ----------------------------------------------------------

    def list_jobs(self, namespaces: list[str] | None = None) -> list[Obj]:
        """Every job the operator watches (`namespaces` is the settings', which the
        informers were built for). A job whose status the reconcile wrote and the cache has
        not caught up with yet is read from the API server, so a pass never misses an
        admission this replica wrote (the book holds the ones not written yet)."""
        if not self.jobs or not all(i.synced.is_set() for i in self.jobs):
            return self.api.list_jobs(namespaces)
        jobs = {
            ((j.get("metadata") or {}).get("namespace"), (j.get("metadata") or {}).get("name")): j
            for informer in self.jobs
            for j in informer.items()
        }
        with self._lock:  # as in get_job: our last write, another watch's word on the uid
            seen = [k for k, v in self._written_jobs.items() if k in jobs and _rv_of(jobs[k]) == v]
            for key in seen:
                del self._written_jobs[key]
            expected = dict(self._written_jobs)
            pending = set(expected)
            pending |= {k for k, uid in self._current_uids.items()
                        if (_uid_of(jobs[k]) if k in jobs else None) != uid}  # fmt: skip
        for key in sorted(pending):
            live = self.api.get_job(*key)
            with self._lock:  # what the cache must reach now (it may be past our write)...
                # ...unless the reconcile wrote again meanwhile (it runs on another thread):
                # this read may predate that write, and must not stand for it.
                if key in expected and self._written_jobs.get(key, _GONE) == expected[key]:
                    self._written_jobs[key] = _rv_of(live) if live is not None else None
            if live is None:
                jobs.pop(key, None)
            else:
                jobs[key] = live
        return list(jobs.values())

    def list_all_pods(self) -> list[Obj]:
        """Every unfinished pod of the cluster (from the API server until both caches that
        hold them have listed)."""
        if not self.jobs_pods_hold_capacity:
            return _read(self.unfinished_pods, self.api.list_all_pods)
        informers = [self.unfinished_pods, *self.job_pods]
        if not all(i is not None and i.synced.is_set() for i in informers):
            return self.api.list_all_pods()
        assert self.unfinished_pods is not None
        return self.unfinished_pods.items() + [
            p for i in self.job_pods for p in i.items()
            if (p.get("status") or {}).get("phase") not in FINISHED_PHASES
        ]  # fmt: skip

    def list_resource_quotas(self) -> list[Obj]:
        return _read(self.quotas, self.api.list_resource_quotas)

    def list_priority_classes(self) -> list[Obj]:
        return _read(self.priority_classes, self.api.list_priority_classes)

    def _scope(self, informers: list[Informer], namespace: str) -> Informer | None:
        """The informer that watches `namespace` (None: the operator does not)."""
        return next((i for i in informers if i.namespace in (None, namespace)), None)


_GONE = object()  # no entry (the cache caught up, or the job was forgotten)


def _uid_of(obj: Obj) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid")
    return str(uid) if uid else None


def _rv_of(obj: Obj) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv else None


def _read(informer: Informer | None, live: Callable[[], list[Obj]]) -> list[Obj]:
    """The informer's objects once it has listed, else a list from the API server."""
    if informer is None or not informer.synced.is_set():
        return live()
    return informer.items()


def _same(live: list[Obj], cached: list[Obj]) -> bool:
    """The cache shows the same pods as the API server: same incarnations, each as far
    along (resourceVersion)."""
    return versions(live) == versions(cached)
