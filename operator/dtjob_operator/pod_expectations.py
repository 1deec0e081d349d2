"""What the pods cache must show before a job's next reconcile may trust it (pure), in the
manner of client-go's ControllerExpectations.

A reconcile that creates or deletes a job's pods knows what it did: this pod now exists as
this uid, that one (this uid) is going. Until the watch has brought that, the next reconcile
of the job would read a stale cache, and it used to read the pods live instead: one LIST per
gang it created, which the API server answered by filtering the namespace's pods (1,600 in a
burst) and the operator by decoding them. Checking the cache against what the pass did
settles most of those without a request; a write whose outcome is not known (a lost
answer, a create that found the name taken) leaves only the live read, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass
class PodExpectations:
    """`present`: name -> uid the cache must show; `gone`: name -> uid it must no longer
    show (or show terminating); `known` False once a write's outcome is unknown; `pending`:
    passes that started writing and have not said they are done (one that raised never
    does: its writes are not all known)."""

    present: dict[str, str] = field(default_factory=dict)
    gone: dict[str, str] = field(default_factory=dict)
    known: bool = True
    pending: int = 0

    def created(self, name: str, uid: str | None) -> None:
        if uid is None:
            self.known = False
            return
        self.present[name] = uid
        self.gone.pop(name, None)

    def deleted(self, name: str, uid: str | None) -> None:
        if uid is None:
            self.known = False
            return
        self.gone[name] = uid
        if self.present.get(name) == uid:
            del self.present[name]

    def met_by(self, cached: Iterable[Obj]) -> bool:
        """The cache (the job's pods as the watch has them) shows everything the writes
        did."""
        if not self.known or self.pending:
            return False
        by_name = {}
        for pod in cached:
            meta = pod.get("metadata") or {}
            by_name[meta.get("name")] = meta
        for name, uid in self.present.items():
            if (by_name.get(name) or {}).get("uid") != uid:
                return False
        for name, uid in self.gone.items():
            meta = by_name.get(name)
            if meta is not None and meta.get("uid") == uid and not meta.get("deletionTimestamp"):
                return False
        return True
