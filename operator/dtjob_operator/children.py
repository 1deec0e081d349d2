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

    def create(self, plan: Plan, job: Obj) -> CreateError | None:
        """Create the plan's children; the API server's refusal, if any (a permanent one
        in preference, since it decides the job's fate)."""
        # The other children first (pods mount the ConfigMap, run as the ServiceAccount),
        # concurrently but for the RoleBinding, which comes after its Role: the API server
        # checks a binding against the rules of the Role it names (RBAC escalation), and
        # the operator may not `bind`. Then the gang's pods, one probe first and then the
        # rest at once (policies/probe_first.py): a refused gang stops after its first
        # refusal instead of one doomed POST per pod.
        uid = job["metadata"]["uid"]
        others = [obj for obj in plan.create if obj["kind"] != "Pod"]
        for stage in (
            [obj for obj in others if obj["kind"] != "RoleBinding"],
            [obj for obj in others if obj["kind"] == "RoleBinding"],
        ):
            results = list(self._pool.map(lambda obj: self._try(obj, job), stage))
            self._note_ensured(uid, stage, results)
            refused = _first_refusal([error for _, error in results])
            if refused is not None:
                return refused
        pods_to_create = [obj for obj in plan.create if obj["kind"] == "Pod"]
        results = create_in_batches(
            pods_to_create,
            lambda batch: list(self._pool.map(lambda pod: self._try(pod, job), batch)),
            refused=lambda result: result[1] is not None,
        )
        self.metrics.pods_created.inc(sum(created for created, _ in results))
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
