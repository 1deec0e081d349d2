"""The admission seam (DESIGN.md, "Admission backends"): one question, "may this job's gang
start, at what size, placed where?", asked of whichever backend holds the job, and one typed
answer, the AdmissionVerdict, that the lifecycle planner reads without learning who gave it.

Three adapters implement AdmissionBackend, as Kueue's jobframework has one small adapter per
job kind behind one generic reconciler: the built-in gang admission (builtin.py), Kueue
(kueue/backend.py: the job becomes a Workload) and external (external.py: someone else
decides; the operator only creates). router.py picks a job's backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dtjob_api.status import AdmissionBackendName
from dtjob_operator.admission.placement import Placement
from dtjob_operator.constants import REASON_PREEMPTED, REASON_WAITING_FOR_ADMISSION
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.policies.times import parse_time

Obj = dict[str, Any]
JobKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, kw_only=True)
class AdmissionVerdict:
    """A backend's answer for one job in one reconcile pass."""

    by: AdmissionBackendName = AdmissionBackendName.BUILTIN
    """Who answered (status.admission.backend): a job moved between backends is handed over
    by the one it leaves (router.py)."""
    admitted: bool = True
    """False holds a job that has no gang yet in phase Queued (no pods)."""
    message: str = ""
    """Why the job is not admitted yet (the Admitted=False condition's message)."""
    reason: str = REASON_WAITING_FOR_ADMISSION
    """The Admitted=False condition's reason while the job waits."""
    admitted_message: str = ""
    """Who admitted the gang and where, when the backend says (Kueue: the ClusterQueue and
    the flavors; built-in: the topology domain): the Admitted=True condition's message."""
    announce_changes: bool = False
    """The planner emits the Admitted Event whenever that message changes (Kueue, whose
    admission can change under a running job). False where the backend announces each
    admission itself, once, also across an operator restart (built-in)."""
    queue_position: int | None = None
    """The job's position in its namespace's queue while it waits (built-in)."""
    stop: str | None = None
    """The gang must stop (SIGTERM: the trainer checkpoints) and the job waits, Suspended,
    until it is admitted again: the message (a preemption, an eviction, a deactivation)."""
    stop_reason: str = REASON_PREEMPTED
    """The Suspended condition's reason for `stop`: Preempted (counted once per episode in
    status.admission.preemptions) or Deactivated (it stays stopped until someone resumes it)."""
    fail: tuple[str, str] | None = None
    """(reason, message): the admission can never be applied to this job (e.g. an admission
    check's podSetUpdate conflicts with the pods): the job fails."""
    domain: str | None = None
    """Where the built-in admission placed the gang (status.admission.domain)."""
    elastic_size: int | None = None
    """The worker pods an elastic job was admitted at (status.elastic)."""
    resize: tuple[int, str] | None = None
    """The admission resizes this running elastic job: (worker pods, why)."""
    refit_pending: bool = False
    """An admitted gang restarted after a failure, not yet checked by an admission pass
    against what is free now: its pods wait (admission/controller.py, _awaits_refit)."""
    placements: Mapping[str, Placement] = field(default_factory=dict)
    """pod name -> what the admission adds to that pod when it is made (placement.py)."""

    @property
    def queues(self) -> bool:
        """Whether the job waits in a queue of the admission's (built-in, Kueue) while it is
        not admitted; an external admission has none here: its gang is re-created."""
        return self.by != AdmissionBackendName.EXTERNAL

    @property
    def places(self) -> bool:
        """Whether the admission places gangs by topology (spec.placement.topology)."""
        return self.by != AdmissionBackendName.EXTERNAL


class AdmissionBackend:
    """One way of admitting gangs. The reconcile, for each job, asks the backend that holds
    it for a verdict (`view`), plans, writes, then tells it what the pass did (`after`)."""

    name: AdmissionBackendName

    def view(self, job: Obj, pods: Sequence[Obj]) -> AdmissionVerdict:
        """The verdict for an unfinished job, whose pods (owned, any generation) are `pods`."""
        raise NotImplementedError

    def admitted(self, job: Obj, old: dict[str, Any], message: str | None) -> None:
        """The job's Admitted=True condition was just written over status `old`."""

    def after(self, job: Obj, old: dict[str, Any], new: dict[str, Any], deleted_pods: bool) -> None:
        """The pass wrote status `new` over `old` (and deleted pods, if `deleted_pods`)."""

    def release(self, job: Obj) -> None:
        """The job moved to another backend: drop what this one held for it."""

    def forget(self, key: JobKey, job: Obj | None) -> None:
        """The job is gone (`job`: its last state, when known)."""

    def request(self) -> None:
        """Something that can change admissions happened (room freed, a quota changed)."""

    def start(self) -> None:
        """Start what runs beside the reconcile (the built-in admission's passes)."""

    def stop(self) -> None:
        """Stop it."""

    def clear(self) -> None:
        """This replica stopped leading: decisions of its own no longer hold."""


def observe_admission_wait(metrics: OperatorMetrics, job: Obj, old: dict[str, Any]) -> None:
    """dtjob_admission_wait_seconds: from the job's creation, or its last re-queue, to now
    (its admission)."""
    since = (old.get("admission") or {}).get("lastRequeueTime")
    created = parse_time(since) or parse_time(job["metadata"].get("creationTimestamp"))
    if created is not None:
        wait = (datetime.now(UTC) - created).total_seconds()
        metrics.admission_wait_seconds.labels(namespace=job["metadata"]["namespace"]).observe(wait)
