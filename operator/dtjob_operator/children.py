"""Creating a job's children for the reconcile: the other children first and in order,
then the gang's pods, a probe first; a refusal becomes a CreateError for the planner,
and a refused job is retried with a backoff of its own. Split from reconcile.py, which
decides when; this module knows how."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from dtjob_operator.k8s import KubeApi, Obj
from dtjob_operator.kill_points import AFTER_FIRST_POD, KillPoints
from dtjob_operator.kubehttp import ApiException
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.plan_types import Plan
from dtjob_operator.policies.create_errors import CreateError, create_error_of
from dtjob_operator.policies.ownership import ownership_conflict
from dtjob_operator.policies.probe_first import create_in_batches

log = logging.getLogger(__name__)

# First retry of a create the API server refused for a reason that may clear (quota, 5xx,
# another's object under a child's name), and the longest wait: what blocks it is usually
# cleared by a person, and the job should start soon after; one POST per 30 s is cheap.
CREATE_RETRY_BASE = 1.0
CREATE_RETRY_MAX = 30.0


class ChildCreator:
    """Creates children through `api`, per-pod calls on `pool`; thread-safe per job (one
    worker reconciles a job at a time)."""

    def __init__(
        self,
        api: KubeApi,
        metrics: OperatorMetrics,
        pool: ThreadPoolExecutor,
        kill_points: KillPoints,
        on_pod: Callable[[str, str, str | None], None] = lambda job, name, uid: None,
    ) -> None:
        self.api = api
        # (job uid, pod name, pod uid) of each pod the job is known to have after a create
        # (its pods cache is checked against them: caches.created_pod).
        self.on_pod = on_pod
        self.metrics = metrics
        self._pool = pool
        self.kill_points = kill_points
        # Children that are created once per job and never change (Service, RBAC): after a
        # successful create-or-exists we stop re-creating them on every pass.
        self._ensured: dict[str, set[tuple[str, str]]] = {}
        self._failures: dict[str, int] = {}  # by job UID: refused creates in a row

    def create(
        self, plan: Plan, job: Obj, before_pods: Callable[[], object] = lambda: None
    ) -> CreateError | None:
        """Create the plan's children; the API server's refusal, if any (a permanent one
        in preference, since it decides the job's fate). `before_pods` returns once what
        must be stored before any pod is (the Admitted condition) is, or raises; it runs
        meanwhile on the caller's side."""
        # Three round trips, whatever the gang's size:
        # 1. the other children at once (pods run as the ServiceAccount and mount the
        #    ConfigMaps; the admission write goes meanwhile) but for the RoleBinding, which
        #    needs its Role (the API server checks a binding against the rules of the Role
        #    it names, and the operator may not `bind`);
        # 2. the RoleBinding and one probe pod (policies/probe_first.py);
        # 3. the rest of the gang at once (api_concurrency at a time).
        # Created one after the other, six children and a gang in slow-start batches were
        # ten round trips per job, most of a burst's time.
        uid = job["metadata"]["uid"]
        first = [o for o in plan.create if o["kind"] not in ("Pod", "RoleBinding")]
        results = list(self._pool.map(lambda obj: self._try(obj, job), first))
        self._note_ensured(uid, first, results)
        refused = _first_refusal([error for _, error in results])
        if refused is not None:
            return refused
        before_pods()
        bindings = [o for o in plan.create if o["kind"] == "RoleBinding"]
        pods = [o for o in plan.create if o["kind"] == "Pod"]
        results = create_in_batches(
            bindings + pods,
            lambda batch: list(self._pool.map(lambda obj: self._try(obj, job), batch)),
            refused=lambda result: result[1] is not None,
            probe=len(bindings) + 1,
        )
        self._note_ensured(uid, bindings, results[: len(bindings)])
        self.metrics.pods_created.inc(sum(created for created, _ in results[len(bindings) :]))
        return _first_refusal([error for _, error in results])

    def _note_ensured(
        self, uid: str, objs: list[Obj], results: list[tuple[bool, CreateError | None]]
    ) -> None:
        """Remember the once-only children that now exist (ConfigMaps are watched)."""
        for obj, (_, error) in zip(objs, results, strict=True):
            if error is None and obj["kind"] != "ConfigMap":
                self._ensured.setdefault(uid, set()).add((obj["kind"], obj["metadata"]["name"]))

    def _try(self, obj: Obj, job: Obj) -> tuple[bool, CreateError | None]:
        """(created, refusal): an API error becomes a CreateError for the planner; other
        errors (the network, a bug) still end the pass and retry it with backoff. An object
        already there is used only if it is this job's (policies/ownership.py)."""
        meta, job_meta = obj["metadata"], job["metadata"]
        try:
            if (uid := self._create(obj)) is not None:
                if obj["kind"] == "Pod":
                    self.on_pod(job_meta["uid"], meta["name"], uid)
                return True, None
            existing = self.api.read_child(obj["kind"], meta["namespace"], meta["name"])
            conflict = ownership_conflict(
                existing, obj["kind"], meta["name"], job_meta["name"], job_meta["uid"]
            )
            if obj["kind"] == "Pod" and conflict is None:  # ours already (None: gone again)
                self.on_pod(job_meta["uid"], meta["name"], _uid_of(existing))
            return False, conflict
        except ApiException as exc:
            if exc.status is None:
                raise
            name = obj["metadata"]["name"]
            log.info("creating %s %s refused: %s %s", obj["kind"], name, exc.status, exc.reason)
            return False, create_error_of(obj["kind"], name, exc.status, exc.reason, exc.body)

    def _create(self, obj: Obj) -> str | None:
        """api.create (the new object's uid; None: the name was taken), passing the
        test-only kill point after a pod (kill_points.py)."""
        if obj["kind"] != "Pod":
            return self.api.create(obj)
        with self.kill_points.pod_creates():
            created = self.api.create(obj)
            if created:
                self.kill_points.reached(AFTER_FIRST_POD)
            return created

    def backoff(self, uid: str) -> float:
        """When to retry after a refusal that may clear: 1 s doubling, at most 30 s."""
        n = self._failures.get(uid, 0)
        self._failures[uid] = n + 1
        return float(min(CREATE_RETRY_MAX, CREATE_RETRY_BASE * 2**n))

    def created(self, uid: str) -> None:
        """The job's creates went through: the next refusal starts the backoff afresh."""
        self._failures.pop(uid, None)

    def ensured(self, uid: str) -> set[tuple[str, str]]:
        """(kind, name) of the job's once-only children known to exist."""
        return self._ensured.get(uid, set())

    def forget(self, uid: str) -> None:
        self._ensured.pop(uid, None)
        self._failures.pop(uid, None)


def _first_refusal(errors: list[CreateError | None]) -> CreateError | None:
    """The refusal that speaks for a batch: a permanent one first, since it decides the
    job's fate."""
    refused = [error for error in errors if error is not None]
    refused.sort(key=lambda e: not e.permanent)
    return refused[0] if refused else None


def _uid_of(obj: Obj | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("uid")
