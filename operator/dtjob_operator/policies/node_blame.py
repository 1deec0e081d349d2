"""Which node a gang's restart points at, and the nodes a job's next gangs avoid (issue 36,
docs/lifecycle.md "Nodes that make gangs sick"). Pure.

A restart names a node when the evidence is about the node, not the program:
- the failed container's last words name a GPU or interconnect fault (hardware.py);
- a stall whose first-stopped rank (the heartbeat summary, stall_blame) ran there;
- the failure that decided a restart came from the same node as the one that decided the
  restart before (status.lastFailure), within the avoidance time, while the gang spanned
  several nodes: the failures follow the node.
A single ordinary exit (a Python exception, OOMKilled, a lost peer) names no node: the
program, not the machine, is the likely cause, and avoiding a healthy node only shrinks
the room the gang can use. OOMKilled never does, repeated or not: the memory is the
program's. Nor does a node lost (NotReady, Unknown): nothing places a pod on it while it
is, and a kubelet restarted is healthy again, which an hour's avoidance would hold against
it (on a two-node pool, a stranded job).

Each named node is avoided by the job's next gangs until `until` (the operator's
avoidNodeSeconds after it was named): the pods get a node affinity `metadata.name NotIn
[...]` as a preference of the greatest weight (admission/placement.py: the scheduler and
Kueue honour it), and the built-in admission keeps the gang off the node while it could fit
elsewhere (admission/decide.py). At most MAX_AVOIDED nodes at once, the latest kept: a job
on a small pool must not avoid its way out of every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dtjob_operator.kueue.multikueue import dispatched
from dtjob_operator.policies.failure_policy import PodFailure
from dtjob_operator.policies.hardware import hardware_fault
from dtjob_operator.policies.pods import name_of, node_of
from dtjob_operator.policies.stall_blame import first_stopped, pod_of_rank
from dtjob_operator.policies.times import format_time, parse_time

MAX_AVOIDED = 8
WHY_LIMIT = 200  # characters of the reason kept in status


@dataclass(frozen=True)
class Suspect:
    """A node a restart points at, and why, in words for the status and the Event."""

    node: str
    why: str


@dataclass(frozen=True)
class Avoided:
    """status.avoidedNodes[]: a node the job's next gangs keep off, until when, and why."""

    node: str
    why: str
    until: datetime

    def to_status(self) -> dict[str, str]:
        return {"node": self.node, "reason": self.why, "until": format_time(self.until)}


def from_failure(failure: PodFailure, pods: Sequence[Mapping[str, Any]]) -> Suspect | None:
    """The node of the decisive failure's pod, when the container's last words name a
    hardware fault; else None."""
    node = _node_of_failed(failure, pods)
    if node is None:
        return None
    line = hardware_fault(failure.detail)
    if line is None:
        return None
    return Suspect(node, f"pod {failure.pod} failed with a hardware fault: {line}"[:WHY_LIMIT])


def _node_of_failed(failure: PodFailure, pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The node the failed pod ran on; None when unknown (never scheduled, not listed)."""
    pod = next((p for p in pods if name_of(p) == failure.pod), None)
    return node_of(pod) if pod is not None else None


def failure_site(
    failure: PodFailure, pods: Sequence[Mapping[str, Any]], now: datetime
) -> dict[str, str] | None:
    """status.lastFailure: the pod whose failure decided a restart, its node and when."""
    node = _node_of_failed(failure, pods)
    if node is None:
        return None
    return {"pod": failure.pod, "node": node, "time": format_time(now)}


def from_repeat(
    failure: PodFailure,
    pods: Sequence[Mapping[str, Any]],
    last: Mapping[str, Any] | None,
    now: datetime,
    window: float,
) -> Suspect | None:
    """The node when this restart's decisive failure came from the node of the last one
    (`last`, status.lastFailure), at most `window` seconds ago, and the gang ran on more
    than one node (on one node, the program and the node cannot be told apart)."""
    site = failure_site(failure, pods, now)
    if site is None or not last or failure.reason == "OOMKilled":
        return None
    when = parse_time(last.get("time"))
    if last.get("node") != site["node"] or when is None or (now - when).total_seconds() > window:
        return None
    if len({n for p in pods if (n := node_of(p))}) < 2:
        return None
    return Suspect(
        site["node"],
        f"two gangs in a row failed first there: pod {last.get('pod')}, then pod "
        f"{failure.pod} ({failure.reason or 'exit'} {failure.exit_code})"[:WHY_LIMIT],
    )


def from_stall(
    progress: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]
) -> Suspect | None:
    """The node of the rank that stopped first in a stall, when the trainer said which."""
    rank = first_stopped(progress)
    pod = pod_of_rank(rank, pods) if rank is not None else None
    node = (pod.get("spec") or {}).get("nodeName") if pod is not None else None
    if not node:
        return None
    return Suspect(str(node), f"rank {rank} (pod {name_of(pod or {})}) stopped first in a stall")


def read(value: object, now: datetime) -> list[Avoided]:
    """status.avoidedNodes, less what expired and what does not parse."""
    kept = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, Mapping):
            continue
        node, until = item.get("node"), parse_time(item.get("until"))
        if isinstance(node, str) and node and until is not None and until > now:
            kept.append(Avoided(node, str(item.get("reason") or ""), until))
    return kept


def avoid(
    prior: Sequence[Avoided], suspect: Suspect | None, now: datetime, seconds: float
) -> list[Avoided]:
    """The avoided nodes after a restart that named `suspect` (None: unchanged). A node
    named again is avoided anew from now; the oldest go past MAX_AVOIDED."""
    if suspect is None or seconds <= 0:
        return list(prior)
    until = now.replace(microsecond=0) + timedelta(seconds=seconds)
    kept = [a for a in prior if a.node != suspect.node]
    return [*kept, Avoided(suspect.node, suspect.why, until)][-MAX_AVOIDED:]


def names(avoided: Iterable[Avoided]) -> tuple[str, ...]:
    return tuple(sorted({a.node for a in avoided}))


def cluster_suspects(
    jobs: Iterable[Mapping[str, Any]], now: datetime, min_jobs: int
) -> dict[str, tuple[str, ...]]:
    """Nodes that the unexpired avoidances of at least `min_jobs` different jobs name (each
    job's status.avoidedNodes), with those jobs (`namespace/name`, sorted): every job keeps
    off them, not only those whose gangs they made sick. {} when `min_jobs` is 0 (off). A job
    MultiKueue runs elsewhere counts not: its status is copied from a worker cluster."""
    if min_jobs <= 0:
        return {}
    named: dict[str, set[str]] = {}
    for job in jobs:
        entries = (job.get("status") or {}).get("avoidedNodes")
        if not entries or dispatched(job):  # nearly every job: a dict lookup each
            continue  # (a MultiKueue job's status is a worker's: it names that cluster's nodes)
        meta = job.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        for avoided in read(entries, now):
            named.setdefault(avoided.node, set()).add(key)
    return {n: tuple(sorted(keys)) for n, keys in sorted(named.items()) if len(keys) >= min_jobs}
