"""A gang whose pods stay Running while one rank hangs (issue 36): the operator declares it
stalled once its step stood still for runPolicy.progressDeadlineSeconds, names the rank that
stopped first and its pod, restarts the gang from its checkpoint, and the job Succeeds. The
hung rank printed its stacks into its log before the restart. Before it hangs, the same rank
is slowed on purpose (DTJ_FAULT_SLOW_RANK): `kubectl dtj top` names it a straggler, with its
pod and node, and a Straggler Event says so once.

The hang is the trainer's test-only fault hook (DTJ_FAULT_HANG_AT_STEP, docs/env-contract.md):
rank 1 blocks before a step of the first gang only, as a rank stuck in a data loader would;
rank 0 then waits in the step's all-reduce. The figures (hang to declaration, declaration to
training again) are printed for bench/ to quote.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.realnode import E2E, watch_job

DEADLINE = 30
HANG_AT = 150
STEPS = 600
# The step the operator sees stand still is the last one rank 0 reported before the hang:
# reports go out every logEverySteps (20) and at most every 5 s, so it is at or after the
# checkpoint before the hang (every 50 steps here) and at or before the hang.
EARLIEST = HANG_AT - 50


@pytest.mark.timeout(900)
def test_a_hung_rank_is_declared_stalled_named_and_the_gang_resumes(
    e2e: E2E, e2e_namespace: str
) -> None:
    ns = e2e_namespace
    claim = e2e.hostpath_claim(ns, Path("/tmp") / f"dtjob-{ns}-ckpt")
    hang = [
        {"name": "DTJ_FAULT_HANG_AT_STEP", "value": str(HANG_AT)},
        {"name": "DTJ_FAULT_HANG_RANK", "value": "1"},
        # Slower first: 150 ms of CPU more per step, the first gang only, as the hang. The
        # heartbeats come every 5 s (a sixth of the deadline): 3 slow ones in a row make a
        # straggler, well before the hang.
        {"name": "DTJ_FAULT_SLOW_RANK", "value": "1"},
        {"name": "DTJ_FAULT_SLOW_SECONDS", "value": "0.15"},
    ]
    job = e2e.apply_example(
        "data-parallel", ns, checkpoint__claimName=claim, checkpoint__everySteps=50,
        trainer__steps=STEPS, runPolicy__progressDeadlineSeconds=DEADLINE,
        roles__worker__template__env=hang,
    )  # fmt: skip
    name = job["metadata"]["name"]
    rank1 = f"{name}-worker-1"
    seen: dict[str, Any] = {}

    def watch(obj: dict[str, Any], row: str) -> None:
        st = obj.get("status", {})
        now = time.monotonic()
        step = (st.get("progress") or {}).get("step")
        if st.get("restarts", 0) == 0 and st.get("phase") == "Running" and "top" not in seen:
            top = e2e.dtj("top", "--count", "1", "-n", ns, timeout=60)
            if "straggles" in top.stdout:
                seen["top"] = top.stdout
        if st.get("restarts", 0) == 0 and step is not None and step != seen.get("step"):
            seen["step"], seen["hung"] = step, now  # the last move seen before the stall
        if st.get("restarts", 0) == 0 and "hung" in seen and "stacks" not in seen:
            log = e2e.kubectl("logs", "-n", ns, rank1, check=False)
            if re.search(r"dtjob: rank 1 stalled at step \d+ for \d+s; stacks follow", log):
                seen["stacks"] = log
        if st.get("restarts", 0) >= 1 and "declared" not in seen:
            seen["declared"] = now
            seen["restart"] = next(
                (c for c in st.get("conditions", []) if c["type"] == "Restarting"), {}
            )
        if "declared" in seen and st.get("phase") == "Running" and step and step > HANG_AT:
            seen.setdefault("resumed", now)
            seen.setdefault("resumed_step", step)

    done = watch_job(e2e, ns, name, timeout=840, on_poll=watch)
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1 and status["progress"]["step"] == STEPS, status
    # The restart's Event (the Restarting condition says the same, but may have turned to
    # PodsReady before a poll saw it).
    message = e2e.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"reason=Stalled,involvedObject.name={name}",
        "-o", "jsonpath={.items[0].message}",
    )  # fmt: skip
    restart = seen.get("restart") or {}
    if restart.get("status") == "True":
        assert (restart["reason"], restart["message"]) == ("Stalled", message), restart
    still = re.search(r"training stalled: step (\d+) has not moved for", message)
    assert still is not None and EARLIEST <= int(still.group(1)) <= HANG_AT, message
    assert f"from the last checkpoint (step {HANG_AT})" in message, message
    assert f"deadline {DEADLINE}s, runPolicy.progressDeadlineSeconds" in message, message
    assert f"rank 1 (pod {rank1} on node dtjob-real-0) stopped first, at step {HANG_AT}" in (
        message
    ), message
    assert "waiting in fault (dtjob_trainer/fault.py" in message, message
    # The operator kept the stacks before the restart deleted the pods: rank 1's pod first.
    kept = e2e.get("configmap", "-n", ns, f"{name}-stalls")["data"]["stacks.txt"]
    assert still.group(0) in kept.split("\n")[0], kept[:500]
    assert kept.split("\n=== pod ")[1].startswith(f"{rank1}\n"), kept  # read first
    assert "dtjob: rank 1 stalled at step" in kept and "fault.py" in kept, kept[:3000]
    # The hung rank's stacks were in its log before the restart deleted it: the fault hook's
    # sleep is where its main thread waits.
    assert "stacks" in seen, "rank 1 printed no stall line before the restart"
    assert "fault.py" in seen["stacks"], seen["stacks"][-3000:]
    # The slowed rank was named in `top`, with its pod and node, and an Event said so once.
    assert "top" in seen, "kubectl dtj top never named a straggler before the hang"
    assert re.search(
        rf"rank 1 \(pod {rank1} on node dtjob-real-0\) straggles: [\d.]+x the CPU time",
        seen["top"],
    ), seen["top"]
    told = e2e.kubectl(
        "get", "events", "-n", ns, "--field-selector",
        f"reason=Straggler,involvedObject.name={name}", "-o", "jsonpath={.items[*].message}",
    )  # fmt: skip
    assert "rank 1" in told, told
    # Resumed from the checkpoint at or before the hang, not from scratch.
    assert seen.get("resumed_step", 0) > HANG_AT - 50, seen
    print(  # the figures, for the note and bench/
        f"stall e2e: declared {seen['declared'] - seen['hung']:.0f}s after step {seen['step']} "
        f"was first seen (deadline {DEADLINE}s); training again "
        f"{seen.get('resumed', 0) - seen['declared']:.0f}s after the declaration"
    )
