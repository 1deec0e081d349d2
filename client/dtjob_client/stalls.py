"""What `kubectl dtj why` says about a gang's progress and its stalls (docs/lifecycle.md,
"Stalled gangs"), from the operator's status.progressWatch and the job's conditions; the
deadline is the operator's figure, never recomputed here. Pure."""

from __future__ import annotations

from datetime import datetime

from dtjob_api.spec import StallPolicy
from dtjob_api.status import REASON_STALLED
from dtjob_client.jobs import Job, parse_time

HELP = 'docs/troubleshooting.md, "My job is Running but not training"'


def stall_note(job: Job, last_stall_event: str | None) -> str | None:
    """One sentence when the gang restarts, restarted last or failed because its training
    stalled; `last_stall_event` is the time of the latest Stalled Event about the job."""
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


def _ago(time: str, now: datetime) -> int:
    return max(0, round((now - parse_time(time)).total_seconds()))
