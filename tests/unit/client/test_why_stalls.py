"""`kubectl dtj why` on a gang's progress and its stalls: the step and when it last moved,
the operator's stall deadline, and one sentence when a restart or failure was a stall."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from unit.client.builders import JobJson, event

from dtjob_client.render.why_text import format_why
from dtjob_client.why import explain

NOW = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
STALL = (
    "gang restart 1 of at most 3 in 10s, from the last checkpoint (step 1100): training "
    "stalled: step 1200 has not moved for 612s (deadline 600s, learned as 10 x 41.2s per step)"
)


def running(watch: dict[str, Any], **run_policy: Any) -> JobJson:
    return (
        JobJson("bert").role("worker", 4, gpus=2).spec(runPolicy=run_policy)
        .status(phase="Running", ready="4/4", progressWatch=watch)
        .progress(step=watch.get("step"), totalSteps=5000)
    )  # fmt: skip


def said(job: JobJson, *events: dict[str, Any]) -> str:
    return format_why(explain(job.job(), [], list(events), [], NOW))


def test_a_running_job_shows_its_step_and_stall_deadline() -> None:
    watch = {"gang": 1, "step": 1200, "since": "2026-03-01T10:29:18Z",
             "lastMoveTime": "2026-03-01T10:29:18Z", "secondsPerStep": 41.2,
             "deadlineSeconds": 600}  # fmt: skip
    text = said(running(watch))
    assert "4/4 pods ready, step 1200/5000\n" in text
    assert (
        "progress: step 1200, last moved 42s ago (stall deadline 600s, learned from 41.2s "
        "per step)\n"
    ) in text
    explicit = said(running({**watch, "deadlineSeconds": 900}, progressDeadlineSeconds=900))
    assert "progress: step 1200, last moved 42s ago (stall deadline 900s)\n" in explicit
    paused = said(running({**watch, "since": "2026-03-01T10:29:50Z"}))
    assert "learned from 41.2s per step, counted from 10s ago, after a pause)" in paused


def test_a_running_job_not_judged_says_why() -> None:
    base = {"gang": 0, "since": "2026-03-01T10:20:00Z"}
    assert "progress: none reported (a job that reports no progress is never judged" in said(
        running(base)
    )
    paused = said(running({"gang": 0, "step": 7}))
    assert "progress: step 7; the stall clock is stopped while the trainer checkpoints" in paused
    leftover = said(running({**base, "step": 7}))
    assert "progress: step 7, not moved since the gang began running 600s ago" in leftover
    moved = {**base, "step": 8, "lastMoveTime": "2026-03-01T10:29:00Z"}
    assert "(no stall deadline yet: it is learned from the gang's next steps)" in said(
        running(moved)
    )
    assert "(no stall deadline: runPolicy.stallPolicy is Off)" in said(
        running(moved, stallPolicy="Off")
    )


def test_a_stall_restart_is_said_in_one_sentence() -> None:
    restarting = (
        JobJson("bert").role("worker", 4, gpus=2)
        .status(phase="Restarting", reason="Stalled", restarts=1,
                lastRestartTime="2026-03-01T10:20:00Z")
        .condition("Restarting", "True", "Stalled", STALL)
    )  # fmt: skip
    text = said(restarting)
    assert f"Stalled: {STALL}\n" in text
    assert (
        "training stalled (the step stood still past its deadline): the gang restarts from "
        'its last checkpoint (docs/troubleshooting.md, "My job is Running but not training")'
    ) in text
    # Running again: the Event still says the last restart was a stall.
    back = (
        JobJson("bert").role("worker", 4, gpus=2)
        .status(phase="Running", restarts=1, lastRestartTime="2026-03-01T10:20:00Z")
        .condition("Restarting", "False", "PodsReady", "all 4 pods are ready")
    )  # fmt: skip
    stalled = event("bert", "Stalled", STALL, "Warning", time="2026-03-01T10:20:00Z")
    assert "the last gang restart, at 2026-03-01T10:20:00Z, was because training stalled" in (
        said(back, stalled)
    )
    later = back.status(lastRestartTime="2026-03-01T10:25:00Z")
    assert "was because training stalled" not in said(later, stalled)  # another restart since
    failed = (
        JobJson("bert").role("worker", 4, gpus=2).status(phase="Failed")
        .condition("Failed", "True", "BackoffLimitExceeded",
                   "the gang failed again after 3 restarts (backoffLimit 3): training stalled: "
                   "step 1200 has not moved for 612s")
    )  # fmt: skip
    assert "the job failed: its training stalled once more than backoffLimit allows" in said(failed)
    assert (
        "; the stuck ranks' stacks: kubectl -n team-a get configmap bert-stalls -o "
        "jsonpath='{.data.stacks\\.txt}'"
    ) in said(failed)


def member(index: int, node: str) -> dict[str, Any]:
    labels = {"dtjob.io/role": "worker", "dtjob.io/role-index": str(index)}
    meta = {"name": f"bert-worker-{index}", "labels": labels,
            "annotations": {"dtjob.io/rank": str(2 * index)}}  # two ranks a pod  # fmt: skip
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_why_names_a_straggler_and_a_stopped_rank_with_their_pods_and_nodes() -> None:
    watch = {"gang": 0, "step": 1200, "since": "2026-03-01T10:29:18Z",
             "lastMoveTime": "2026-03-01T10:29:18Z", "deadlineSeconds": 600}  # fmt: skip
    gang = [member(0, "gpu-1"), member(1, "gpu-7")]
    ranks = {
        "count": 4, "stopped": 1,
        "stragglers": [{"rank": 1, "slowdown": 2.4}],
        "behind": [{"rank": 3, "step": 1200, "lastStepAgo": 75, "waitingIn": "sleep (f.py:9)"}],
    }  # fmt: skip
    text = format_why(explain(running(watch).job(), gang, [], [], NOW, {"ranks": ranks}))
    assert (
        "ranks: rank 1 (pod bert-worker-0 on node gpu-1) straggles: 2.4x the CPU time per step "
        "of the other ranks; rank 3 (pod bert-worker-1 on node gpu-7) has not stepped for 75s, "
        "waiting in sleep (f.py:9)\n"
    ) in text
    # Every rank keeping pace, or no summary at all (a custom image): nothing is said.
    calm = {**ranks, "stopped": 0, "stragglers": []}
    assert "ranks:" not in format_why(
        explain(running(watch).job(), gang, [], [], NOW, {"ranks": calm})
    )
    assert "ranks:" not in format_why(explain(running(watch).job(), gang, [], [], NOW, None))


def test_the_nodes_the_next_gangs_keep_off_are_named_with_why_and_until_when() -> None:
    avoided = [{"node": "gpu-7", "until": "2026-03-01T11:30:00Z",
                "reason": "pod bert-worker-3 failed with a hardware fault: Xid 79"}]  # fmt: skip
    job = (
        JobJson("bert").role("worker", 4, gpus=2)
        .status(phase="Restarting", ready="0/4", avoidedNodes=avoided)
    )  # fmt: skip
    assert (
        "avoided nodes: gpu-7 until 2026-03-01T11:30:00Z (pod bert-worker-3 failed with a "
        "hardware fault: Xid 79)\n"
    ) in said(job)
    done = JobJson("bert").role("worker", 4, gpus=2).status(phase="Failed", avoidedNodes=avoided)
    assert "avoided nodes" not in said(done)


def test_where_the_gpu_time_went_is_said_with_the_open_segment_counted_to_now() -> None:
    ledger = {"gpuSeconds": {"training": 7200, "queued": 1800, "lostWork": 900},
              "since": "2026-03-01T10:29:00Z", "phase": "Running", "gpus": 8}  # fmt: skip
    job = (
        JobJson("bert").role("worker", 4, gpus=2)
        .status(phase="Running", ready="4/4", goodput=ledger)
    )  # fmt: skip
    # 60 s x 8 GPUs more of training up to NOW (10:30): 7680 of 10380 GPU-seconds.
    assert "goodput 74% of 2.9 GPU-hours; lost: queued 17%, lostWork 9%\n" in said(job)
