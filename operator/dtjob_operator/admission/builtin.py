"""The built-in gang admission as an admission backend (seam.py): its passes run on a thread
of their own (controller.py) and leave their verdicts in the AdmissionBook (book.py); the
reconcile's view of a job is the book's, and what a pass wrote (admitted, released, ended)
keeps the book in step and asks for the next pass."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from dtjob_api.status import TERMINAL_PHASES, AdmissionBackendName, JobPhase
from dtjob_operator.admission.book import AdmissionBook
from dtjob_operator.admission.controller import AdmissionController, Reads
from dtjob_operator.admission.placement import Placement
from dtjob_operator.admission.seam import (
    AdmissionBackend,
    AdmissionVerdict,
    JobKey,
    Obj,
    observe_admission_wait,
)
from dtjob_operator.constants import (
    EVENT_NORMAL,
    REASON_ADMITTED,
    REASON_PODS_READY_TIMEOUT,
    REASON_WAITING_FOR_ADMISSION,
)
from dtjob_operator.k8s import KubeApi
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.status import admitted_condition, admitted_in

log = logging.getLogger(__name__)

# The phases of a gang that is coming up or runs, which free no room (after()).
COMING_UP = frozenset({JobPhase.STARTING, JobPhase.RUNNING})


class BuiltinBackend(AdmissionBackend):
    """The operator's own gang admission (docs/admission.md)."""

    name = AdmissionBackendName.BUILTIN

    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        metrics: OperatorMetrics,
        enqueue: Callable[[JobKey], None],
        is_leader: Callable[[], bool],
        reads: Reads,
        owns: Callable[[Obj], bool],
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.book = AdmissionBook()
        self.controller = AdmissionController(
            api, settings, metrics, self.book, enqueue, is_leader, reads, owns
        )

    def view(self, job: Obj, pods: Sequence[Obj]) -> AdmissionVerdict:
        seen = self.book.view(job)
        if seen.refit_pending:
            self.controller.request()  # the check it waits for (timer passes may sleep)
        admitted_message = ""
        if seen.admitted and seen.domain:
            admitted_message = f"the whole gang fits, placed in {seen.domain}"
        return AdmissionVerdict(
            by=self.name,
            admitted=seen.admitted,
            message=seen.message,
            reason=seen.reason or REASON_WAITING_FOR_ADMISSION,
            admitted_message=admitted_message,
            queue_position=seen.position,
            stop=seen.preempted,
            domain=seen.domain if seen.admitted else None,
            elastic_size=seen.size if seen.admitted else None,
            resize=seen.resize,
            refit_pending=seen.refit_pending,
            # Pods not created yet go where the admission placed them (pinned to the node).
            placements={pod: Placement(node_name=node) for pod, node in seen.placements.items()},
        )

    def admitted(self, job: Obj, old: dict[str, Any], message: str | None) -> None:
        """The Admitted Event and the admission-wait metric, once per admission; `message`
        is the Admitted condition's (where the gang was placed). The planner's events are
        per transition of the job; admission is the executor's news (the planner cannot
        tell a pass's admission from a restart, nor one lost to an operator restart)."""
        self.api.emit_event(job, EVENT_NORMAL, REASON_ADMITTED, message or "the whole gang fits")
        meta = job["metadata"]
        log.info("admitted %s/%s (uid %s, restarts %s, was %s)", meta["namespace"], meta["name"],
                 meta["uid"], old.get("restarts", 0), old.get("phase"))  # fmt: skip
        observe_admission_wait(self.metrics, job, old)

    def after(self, job: Obj, old: dict[str, Any], new: dict[str, Any], deleted_pods: bool) -> None:
        """Keep the book in step with what the status now says, and ask for a pass when
        room was freed or a job waits."""
        uid = job["metadata"]["uid"]
        was, now = admitted_in(old), admitted_in(new)
        if was and not now:
            meta = job["metadata"]
            log.info("admission of %s/%s withdrawn (%s, phase %s -> %s): %s", meta["namespace"],
                     meta["name"], admitted_condition(new).get("reason"), old.get("phase"),
                     new.get("phase"), admitted_condition(new).get("message", ""))  # fmt: skip
        if (was and not now) or new.get("phase") in TERMINAL_PHASES:
            self.book.forget(uid)
        if now and not was:
            self.admitted(job, old, admitted_condition(new).get("message"))
        if (
            admitted_condition(new).get("reason") == REASON_PODS_READY_TIMEOUT
            and admitted_condition(old).get("reason") != REASON_PODS_READY_TIMEOUT
        ):
            self.metrics.pods_ready_timeouts.labels(namespace=job["metadata"]["namespace"]).inc()
        # A gang coming up (Starting, Running) frees no room and takes none it did not
        # hold: a pass for each of those phase changes was a pass per job per burst for
        # nothing. Any other change of phase (a restart, an end, a suspension) may free it.
        moved = old.get("phase") != new.get("phase") and new.get("phase") not in COMING_UP
        changed = deleted_pods or was != now or moved
        if changed or (not now and uid not in self.book):  # or it waits for a first pass
            self.controller.request()

    def release(self, job: Obj) -> None:
        self.book.forget(job["metadata"]["uid"])
        self.controller.request()

    def forget(self, key: JobKey, job: Obj | None) -> None:
        if job is not None:
            self.book.forget(job["metadata"]["uid"])
        self.controller.request()  # its pods and reservation free room

    def request(self) -> None:
        self.controller.request()

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def clear(self) -> None:
        self.book.clear()
