"""The admission pass's memo of job views between passes (ViewMemo), apart from the snapshot
it serves (snapshot.build_snapshot): a view is made again only when what it is made from
changed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dtjob_operator.admission.snapshot import GangPod, JobView

Obj = Mapping[str, Any]


def versions_of(objs: Iterable[Obj]) -> tuple[tuple[object, object], ...]:
    """(uid, resourceVersion) of each object: what identifies the objects as they are."""
    return tuple(
        ((o.get("metadata") or {}).get("uid"), (o.get("metadata") or {}).get("resourceVersion"))
        for o in objs
    )


class ViewMemo:
    """The JobViews of the last pass, by what each was built from: the job's and its pods'
    versions, its gang (the controller's memo hands the same list while the gang is the
    same), its admission in the book and the PriorityClasses' versions. A view reads nothing
    else (not the clock: the pass's `now` is decide's), so a pass views again only the jobs
    that changed; in a burst of 200 gangs, viewing every job was half of each pass. Objects
    without a uid or resourceVersion (hand-made ones) are viewed every pass. Holds the jobs
    of the last pass only."""

    def __init__(self) -> None:
        self._views: dict[object, tuple[tuple[object, ...], object, JobView | None]] = {}
        self._seen: dict[object, tuple[tuple[object, ...], object, JobView | None]] = {}

    def view(
        self,
        job: Obj,
        pods: tuple[tuple[object, object], ...],
        classes: tuple[tuple[object, object], ...],
        gang_of: Callable[[Obj], Sequence[GangPod] | None],
        admitted: Callable[[Obj], bool],
        build: Callable[[Obj, Sequence[GangPod] | None, bool], JobView | None],
    ) -> JobView | None:
        """The job's view as `build(job, gang, admitted)` makes it, built again only when
        a source changed; `pods`: versions_of the pods labelled as the job's."""
        meta = job.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        gang, yes = gang_of(job), admitted(job)
        if uid is None or version is None or any(p[0] is None or p[1] is None for p in pods):
            return build(job, gang, yes)
        key = (version, pods, classes, yes)
        prior = self._views.get(uid) or self._seen.get(uid)
        if prior is not None and prior[0] == key and prior[1] is gang:
            self._seen[uid] = prior
            return prior[2]
        view = build(job, gang, yes)
        self._seen[uid] = (key, gang, view)
        return view

    def next_pass(self) -> None:
        """Forget the jobs the pass just ended did not look at."""
        self._views, self._seen = self._seen, {}
