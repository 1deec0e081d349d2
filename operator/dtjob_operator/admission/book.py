"""The admission book: the verdicts of the passes, kept for the per-job reconcile (admitted?
position? preempted? placed where? at which size?), and what earlier passes decided that
the next one builds on (placements given, sizes not written yet, since when elastic jobs
could grow). The controller (controller.py) writes it; the reconcile reads it."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dtjob_api.status import JobPhase
from dtjob_operator.admission.decide import Decisions, Verdict
from dtjob_operator.admission.snapshot import STARTED_PHASES, is_admitted
from dtjob_operator.builders.job import elastic_size
from dtjob_operator.status import admitted_condition

Obj = Mapping[str, Any]


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

    def resizing(self) -> dict[str, int]:
        """uid -> the size of the last resize a pass decided for each elastic job."""
        with self._lock:
            return {uid: size for uid, (size, _) in self._resize.items()}

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
