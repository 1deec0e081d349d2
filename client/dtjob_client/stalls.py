"""What `kubectl dtj why` says about a gang's progress and its stalls (docs/lifecycle.md,
"Stalled gangs"), from the operator's status.progressWatch and the job's conditions; the
deadline is the operator's figure, never recomputed here. Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from dtjob_api.goodput import Ledger, summary, totals
from dtjob_api.spec import StallPolicy
from dtjob_api.status import REASON_STALLED
from dtjob_client.jobs import Job, parse_time

HELP = 'docs/troubleshooting.md, "My job is Running but not training"'


def stall_note(job: Job, last_stall_event: str | None) -> str | None:
    """One sentence when the gang restarts, restarted last or failed because its training
    stalled, with where the stuck ranks' stacks are kept; `last_stall_event` is the time
    of the latest Stalled Event about the job."""
    note = _stall_sentence(job, last_stall_event)
    if note is None:
        return None
    return (
        f"{note}; the stuck ranks' stacks: kubectl -n {job.namespace} get configmap "
        f"{job.name}-stalls -o jsonpath='{{.data.stacks\\.txt}}'"
    )


def _stall_sentence(job: Job, last_stall_event: str | None) -> str | None:
    st = job.status
    phase = str(st.phase)
    restarting = next((c for c in st.conditions if c.type == "Restarting"), None)
    if phase == "Restarting" and restarting is not None and restarting.reason == REASON_STALLED:
        return (
            "training stalled (the step stood still past its deadline): the gang restarts "
            f"from its last checkpoint ({HELP})"
        )
    failed = next((c for c in st.conditions if c.type == "Failed"), None)
    if phase == "Failed" and failed is not None and "training stalled" in failed.message:
        return f"the job failed: its training stalled once more than backoffLimit allows ({HELP})"
    last = st.lastRestartTime
    if last_stall_event and last and parse_time(last_stall_event) >= parse_time(last):
        return f"the last gang restart, at {last}, was because training stalled ({HELP})"
    return None


def progress_note(job: Job, now: datetime | None) -> str | None:
    """`progress: step N, last moved Xs ago (stall deadline Ys)` for a Running job."""
    st, watch = job.status, job.status.progressWatch
    if str(st.phase) != "Running" or watch is None or now is None:
        return None
    if watch.step is None:
        return "progress: none reported (a job that reports no progress is never judged stalled)"
    if watch.since is None:
        return (
            f"progress: step {watch.step}; the stall clock is stopped while the trainer "
            "checkpoints or evaluates (or has done its steps)"
        )
    if watch.lastMoveTime is None:
        return (
            f"progress: step {watch.step}, not moved since the gang began running "
            f"{_ago(watch.since, now)}s ago (judged once it reports a step of its own)"
        )
    head = f"progress: step {watch.step}, last moved {_ago(watch.lastMoveTime, now)}s ago"
    policy = job.spec.runPolicy if job.spec is not None else None
    if watch.deadlineSeconds is None:
        if policy is not None and policy.stallPolicy == StallPolicy.OFF:
            return f"{head} (no stall deadline: runPolicy.stallPolicy is Off)"
        return f"{head} (no stall deadline yet: it is learned from the gang's next steps)"
    how = ""
    if (policy is None or policy.progressDeadlineSeconds is None) and watch.secondsPerStep:
        how = f", learned from {watch.secondsPerStep:.1f}s per step"
    if watch.since != watch.lastMoveTime:
        how += f", counted from {_ago(watch.since, now)}s ago, after a pause"
    return f"{head} (stall deadline {watch.deadlineSeconds}s{how})"


def spent(job: Job, now: datetime | None) -> dict[str, float]:
    """The job's GPU-seconds per goodput bucket, its open segment counted up to `now`."""
    ledger = job.status.goodput
    if ledger is None:
        return {}
    return totals(Ledger.from_status(ledger.model_dump(exclude_none=True)), now)


def goodput_note(job: Job, now: datetime | None) -> str | None:
    """`goodput 82% of 120.5 GPU-hours; lost: queued 10%, lostWork 5%` (dtjob_api/goodput)."""
    return summary(spent(job, now))


def avoided_note(job: Job) -> str | None:
    """`avoided nodes: gpu-7 until <time> (pod j-worker-3 failed with a hardware fault:
    ...)`: the nodes a stall or a hardware fault pointed at, which the job's next gangs
    keep off (docs/lifecycle.md, "Nodes that make gangs sick")."""
    avoided = job.status.avoidedNodes or []
    if not avoided or str(job.status.phase) in ("Succeeded", "Failed"):
        return None
    return "avoided nodes: " + "; ".join(
        f"{a.node} until {a.until} ({a.reason})" if a.reason else f"{a.node} until {a.until}"
        for a in avoided
    )


def ranks_note(
    job: Job, progress: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]]
) -> str | None:
    """The trainer's heartbeat summary of a started job's ranks (progress.json's `ranks`,
    docs/env-contract.md "Heartbeats"): stragglers and the ranks behind, each with its pod
    and node; None without a summary or when every rank keeps pace."""
    if str(job.status.phase) not in ("Running", "Starting", "Restarting"):
        return None
    ranks = (progress or {}).get("ranks")
    if not isinstance(ranks, Mapping):
        return None
    where = _pods_by_rank(pods)
    said = []
    for s in _entries(ranks.get("stragglers")):
        if (rank := _number(s.get("rank"))) is not None and (x := _number(s.get("slowdown"))):
            said.append(
                f"rank {rank:.0f}{where(int(rank))} straggles: {x:.1f}x the CPU time per "
                "step of the other ranks"
            )
    stopped = _number(ranks.get("stopped")) or 0
    for b in _entries(ranks.get("behind"))[:1] if stopped else []:
        if (rank := _number(b.get("rank"))) is not None:
            ago = _number(b.get("lastStepAgo"))
            text = f"rank {rank:.0f}{where(int(rank))} has not stepped"
            text += f" for {ago:.0f}s" if ago is not None else ""
            waiting = b.get("waitingIn")
            said.append(text + (f", waiting in {waiting}" if isinstance(waiting, str) else ""))
    if not said:
        return None
    return "ranks: " + "; ".join(said)


def _pods_by_rank(pods: Iterable[Mapping[str, Any]]) -> Callable[[int], str]:
    """` (pod <name> on node <node>)` of the pod holding a rank (its first rank, by its
    dtjob.io/rank annotation, is the largest not above it)."""
    firsts = []
    for p in pods:
        meta = p.get("metadata") or {}
        first = (meta.get("annotations") or {}).get("dtjob.io/rank")
        if isinstance(first, str) and first.isdigit():
            firsts.append(
                (int(first), str(meta.get("name")), (p.get("spec") or {}).get("nodeName"))
            )
    firsts.sort()

    def where(rank: int) -> str:
        held = [f for f in firsts if f[0] <= rank]
        if not held:
            return ""
        _, name, node = held[-1]
        return f" (pod {name}" + (f" on node {node})" if node else ")")

    return where


def _entries(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _ago(time: str, now: datetime) -> int:
    return max(0, round((now - parse_time(time)).total_seconds()))
