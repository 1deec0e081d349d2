"""What the cluster's pods hold, kept from one admission pass to the next (PodTally).

A pass needs, of every pod: what its namespace and its node hold (requests, host ports)
and which job's it is. Folding 1,600 pods afresh each pass was most of the pass in a
burst of gang creations, where passes run back to back and few pods change between two
of them. The tally keeps each pod's share by (namespace, name) and, each pass, adds and
takes away only the pods whose resourceVersion moved, came or went. The sums are exact
(integer amounts), so a tally carried across passes gives the same figures as a fresh
one (tests/unit/operator/test_admission_usage.py checks it on random histories).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtjob_operator.admission.resources import Resources
from dtjob_operator.constants import LABEL_JOB_NAME

Obj = Mapping[str, Any]
PodKey = tuple[str, str]  # (namespace, name)
JobKey = tuple[str, str]  # (namespace, job name)


@dataclass(frozen=True)
class _Share:
    """One pod as the tally counted it."""

    uid: object
    version: object
    namespace: str
    job: JobKey | None
    live: bool
    node: str | None
    requests: Resources
    ports: tuple[str, ...]


def live(pod: Obj) -> bool:
    """A pod that holds its room: not finished."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class PodsByJob(Mapping[JobKey, Sequence[Obj]]):
    """A job's pods as the tally has them, by name, made into a list only when asked."""

    def __init__(self, jobs: dict[JobKey, dict[str, Obj]]) -> None:
        self._jobs = jobs

    def __getitem__(self, key: JobKey) -> Sequence[Obj]:
        pods = self._jobs[key]
        return [pods[name] for name in sorted(pods)]

    def __iter__(self) -> Iterator[JobKey]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)


class PodTally:
    """The pods' shares, by namespace and node, and each job's pods (see the module
    docstring). Not thread-safe: one admission pass at a time updates it."""

    def __init__(self) -> None:
        self._shares: dict[PodKey, _Share] = {}
        self._namespaces: dict[str, Resources] = {}
        self._nodes: dict[str, Resources] = {}
        self._ports: dict[str, Counter[str]] = {}
        self._jobs: dict[JobKey, dict[str, Obj]] = {}
        self._job_versions: dict[JobKey, tuple[tuple[object, object], ...]] = {}

    def update(
        self,
        pods: Iterable[Obj],
        requests_of: Callable[[Obj], Resources],
        host_ports_of: Callable[[Obj], tuple[str, ...]],
    ) -> None:
        """Count `pods` (every pod there is now) in place of the last pass's."""
        seen: set[PodKey] = set()
        for i, pod in enumerate(pods):
            meta = pod.get("metadata") or {}
            ns, name = meta.get("namespace", ""), meta.get("name")
            # A pod without a name (hand-made) is its own: it is counted afresh each pass.
            key = (ns, name) if name else (ns, f"\0{i}")
            seen.add(key)
            old = self._shares.get(key)
            version = meta.get("resourceVersion")
            if (
                old is not None
                and version is not None
                and old.version == version
                and old.uid == meta.get("uid")
            ):
                continue
            if old is not None:
                self._take(key, old)
            self._put(key, pod, requests_of, host_ports_of)
        for key in [k for k in self._shares if k not in seen]:
            self._take(key, self._shares.pop(key))

    def namespaces_used(self) -> dict[str, Resources]:
        """What the live pods of each namespace request (a copy)."""
        return {ns: dict(r) for ns, r in self._namespaces.items() if r}

    def nodes_used(self) -> dict[str, Resources]:
        """What the live pods bound to each node request (a copy)."""
        return {node: dict(r) for node, r in self._nodes.items() if r}

    def node_ports(self) -> dict[str, set[str]]:
        """The host ports live pods bind on each node."""
        return {node: {p for p, n in c.items() if n > 0} for node, c in self._ports.items()}

    def pods_by_job(self) -> PodsByJob:
        """Every pod labelled with a job's name, by (namespace, job name)."""
        return PodsByJob(self._jobs)

    def job_versions(self, key: JobKey) -> tuple[tuple[object, object], ...]:
        """(uid, resourceVersion) of the job's pods, by name: what ViewMemo compares."""
        if key not in self._job_versions:
            pods = self._jobs.get(key, {})
            self._job_versions[key] = tuple(
                ((pods[n].get("metadata") or {}).get("uid"),
                 (pods[n].get("metadata") or {}).get("resourceVersion"))
                for n in sorted(pods)
            )  # fmt: skip
        return self._job_versions[key]

    # -- one pod in, one pod out ----------------------------------------------------------

    def _put(
        self,
        key: PodKey,
        pod: Obj,
        requests_of: Callable[[Obj], Resources],
        host_ports_of: Callable[[Obj], tuple[str, ...]],
    ) -> None:
        meta = pod.get("metadata") or {}
        job_name = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
        job = (key[0], job_name) if job_name else None
        is_live = live(pod)
        node = (pod.get("spec") or {}).get("nodeName") or None
        share = _Share(
            uid=meta.get("uid"),
            version=meta.get("resourceVersion"),
            namespace=key[0],
            job=job,
            live=is_live,
            node=node,
            requests=requests_of(pod) if is_live else {},
            ports=host_ports_of(pod) if is_live and node else (),
        )
        self._shares[key] = share
        if job is not None:
            self._jobs.setdefault(job, {})[key[1]] = pod
            self._job_versions.pop(job, None)
        if not is_live:
            return
        _add(self._namespaces.setdefault(key[0], {}), share.requests, 1)
        if node:
            _add(self._nodes.setdefault(node, {}), share.requests, 1)
            self._ports.setdefault(node, Counter()).update(share.ports)

    def _take(self, key: PodKey, share: _Share) -> None:
        if share.job is not None:
            pods = self._jobs.get(share.job, {})
            pods.pop(key[1], None)
            if not pods:
                self._jobs.pop(share.job, None)
            self._job_versions.pop(share.job, None)
        if not share.live:
            return
        _add(self._namespaces[share.namespace], share.requests, -1)
        if share.node:
            _add(self._nodes[share.node], share.requests, -1)
            self._ports[share.node].subtract(share.ports)


def _add(total: Resources, amount: Mapping[str, int], sign: int) -> None:
    for name, value in amount.items():
        left = total.get(name, 0) + sign * value
        if left:
            total[name] = left
        else:
            total.pop(name, None)
