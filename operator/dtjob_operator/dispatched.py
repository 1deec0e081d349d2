"""The reconcile of a job MultiKueue runs on another cluster, as seen on the manager
(spec.managedBy: kueue.x-k8s.io/multikueue; kueue/multikueue.py, docs/multikueue.md).

The planner never sees it: there are no pods here to plan, and its status is the worker's,
copied back by MultiKueue, which is the status's one writer. What is left to do here:
- the Workload, made and kept as for any Kueue job (the Kueue backend's view): MultiKueue
  dispatches the job once its Workload is admitted here;
- the Workload's PodsReady and Finished, following the copied status (Kueue's
  waitForPodsReady on the manager reads the first; the second gives the quota back);
- Events that say where the job is while its status is still empty or stale: waiting in
  Kueue (and why), or dispatched to which worker cluster.
"""

from __future__ import annotations

import logging
from typing import Any

from dtjob_api.status import TERMINAL_PHASES
from dtjob_operator.admission.router import AdmissionRouter
from dtjob_operator.admission.seam import AdmissionVerdict
from dtjob_operator.constants import (
    EVENT_NORMAL,
    EVENT_WARNING,
    REASON_DISPATCHED,
    REASON_WAITING_FOR_KUEUE,
)
from dtjob_operator.k8s import KubeApi

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def what_to_say(verdict: AdmissionVerdict) -> tuple[str, str, str] | None:
    """(event type, reason, message) of a dispatched job's verdict, or None."""
    if verdict.fail is not None:
        return EVENT_WARNING, verdict.fail[0], verdict.fail[1]
    if verdict.stop:
        return EVENT_WARNING, verdict.stop_reason or REASON_WAITING_FOR_KUEUE, verdict.stop
    if verdict.admitted and verdict.admitted_message:
        return EVENT_NORMAL, REASON_DISPATCHED, verdict.admitted_message
    if verdict.message:
        return EVENT_NORMAL, verdict.reason or REASON_WAITING_FOR_KUEUE, verdict.message
    return None


class DispatchedJobs:
    """The manager's side of jobs MultiKueue runs elsewhere."""

    def __init__(self, api: KubeApi, admission: AdmissionRouter) -> None:
        self.api = api
        self.admission = admission
        # What was last said of each job (by uid): an Event only when it changes.
        self._said: dict[str, str] = {}

    def reconcile(self, job: Obj) -> None:
        """One pass over a dispatched job: its Workload, and what is said of it."""
        backend = self.admission.route(job)
        status: dict[str, Any] = job.get("status") or {}
        if status.get("phase") in TERMINAL_PHASES:
            verdict = AdmissionVerdict(by=backend.name)
        else:
            verdict = backend.view(job, [])  # no pods of its own here, ever
        if backend is not self.admission.kueue:
            verdict = AdmissionVerdict(
                by=backend.name,
                admitted=False,
                stop=(
                    "spec.managedBy says Kueue's MultiKueue runs this job on another "
                    "cluster, but this operator does not admit jobs through Kueue "
                    "(admission mode external): nothing here dispatches it"
                ),
            )
        said = what_to_say(verdict)
        uid = job["metadata"]["uid"]
        if said is not None and self._said.get(uid) != said[2]:
            self._said[uid] = said[2]
            self.api.emit_event(job, *said)
        # PodsReady and Finished follow the status MultiKueue copied; nothing is written.
        self.admission.after(backend, job, status, status, False)

    def forget(self, uid: str) -> None:
        self._said.pop(uid, None)
