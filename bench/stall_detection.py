"""Stall detection on the real node (issue 36), writing bench/results/stall_detection.json.

`--runs` CPU DataParallel jobs (examples/cpu/data-parallel.yaml, `--workers` pods of one
process each, placed on the real node) each hang one rank on purpose at `--hang-at`, with
the trainer's test-only fault hook (DTJ_FAULT_HANG_AT_STEP / DTJ_FAULT_HANG_RANK, first
gang only; the hung rank takes turns: run i hangs rank i % workers). For each run:

- `hang_to_declared_s`: from the moment the rank hung (the hook prints the time into the
  pod's log) to the operator's restart for `Stalled` (first seen by a 1 s poll);
- `declared_to_training_s`: from then to the restarted gang's step moving past its resume;
- `named`: whether the Stalled Event named the hung rank and its pod as the one that stopped
  first; `deadline_s` and the learned `step_s` (status.progressWatch.secondsPerStep).

The deadline is set (`--deadline`, runPolicy.progressDeadlineSeconds): a learned one is at
least 600 s (policies/stall.py FLOOR_SECONDS), ten minutes a run; past the deadline the
same code declares either. The goal: declared within 2 x the deadline, named 10 of 10.

Needs the real-node stack (hack/realnode-up.sh, as `make test-e2e` brings it up; run here
if it is not up: cold that builds everything). `--parallel` jobs run at once (each in its
own namespace; the admission queues what does not fit).

Usage: python bench/stall_detection.py [--runs 10] [--parallel 2] [--workers 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "tests"))

from helpers.cluster import cluster_cmd  # noqa: E402
from helpers.realnode import E2E  # noqa: E402

HUNG = re.compile(r"dtjob: fault: rank (\d+) hangs before step (\d+) at ([\d.]+)")
NAMED = re.compile(r"rank (\d+) \(pod (\S+) on node \S+\) stopped first")


def stack() -> E2E:
    """The real-node stack, brought up (warm: seconds), as the e2e fixture does."""
    env = {**os.environ, "DTJOB_NODE": "real"}
    subprocess.run([str(TOP / "hack" / "realnode-up.sh"), "bench"], env=env, check=True)
    kubeconfig = Path(cluster_cmd("kubeconfig").stdout.strip())
    state = kubeconfig.parent
    bins = (state / "bin-dir").read_text().strip()
    env = {**env, "KUBECONFIG": str(kubeconfig), "PATH": f"{bins}:{os.environ['PATH']}"}
    return E2E(kubeconfig=kubeconfig, state=state, env=env)


def one_run(e2e: E2E, index: int, args: argparse.Namespace) -> dict[str, Any]:
    """One job with a hung rank, watched to its end; its figures."""
    ns = e2e.new_namespace()
    rank = index % args.workers
    name = f"stall-{index}"
    faults = [
        {"name": "DTJ_FAULT_HANG_AT_STEP", "value": str(args.hang_at)},
        {"name": "DTJ_FAULT_HANG_RANK", "value": str(rank)},
    ]
    e2e.apply_example(
        "data-parallel", ns, name=name, roles__worker__replicas=args.workers,
        trainer__steps=args.hang_at + 60, trainer__logEverySteps=10,
        checkpoint__everySteps=20, runPolicy__progressDeadlineSeconds=args.deadline,
        runPolicy__backoffLimit=2, roles__worker__template__env=faults,
    )  # fmt: skip
    hung_pod = f"{name}-worker-{rank}"
    seen: dict[str, Any] = {}
    end = time.monotonic() + args.timeout
    while time.monotonic() < end:
        job = e2e.job(ns, name)
        st, now = job.get("status", {}), time.time()
        step = (st.get("progress") or {}).get("step")
        restarts = st.get("restarts", 0)
        if restarts == 0 and "hung" not in seen and st.get("phase") == "Running":
            log = e2e.kubectl("logs", "-n", ns, hung_pod, check=False)
            if m := HUNG.search(log):
                seen["hung"] = float(m.group(3))
        if restarts == 0:
            seen["step_s"] = (st.get("progressWatch") or {}).get("secondsPerStep")
        if restarts >= 1 and "declared" not in seen:
            seen["declared"] = now
        if "declared" in seen and restarts >= 1 and step is not None:
            seen.setdefault("resume_step", step)
            if step > seen["resume_step"] and st.get("phase") == "Running":
                seen.setdefault("training", now)
        if st.get("phase") in ("Succeeded", "Failed"):
            seen["phase"] = st["phase"]
            break
        time.sleep(1)
    told = e2e.kubectl(
        "get", "events", "-n", ns, "--field-selector",
        f"reason=Stalled,involvedObject.name={name}", "-o", "jsonpath={.items[0].message}",
        check=False,
    )  # fmt: skip
    named = NAMED.search(told)
    e2e.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    hung, declared, training = seen.get("hung"), seen.get("declared"), seen.get("training")
    return {
        "hung_rank": rank,
        "named_rank": int(named.group(1)) if named else None,
        "named": bool(named and int(named.group(1)) == rank and named.group(2) == hung_pod),
        "hang_to_declared_s": round(declared - hung, 1) if hung and declared else None,
        "declared_to_training_s": round(training - declared, 1) if training and declared else None,
        "step_s": seen.get("step_s"),
        "phase": seen.get("phase"),
        "event": told[:400],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--hang-at", type=int, default=60)
    parser.add_argument("--deadline", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", default=str(TOP / "bench" / "results" / "stall_detection.json"))
    args = parser.parse_args()
    e2e = stack()
    with ThreadPoolExecutor(args.parallel) as pool:
        runs = list(pool.map(lambda i: one_run(e2e, i, args), range(args.runs)))
    detect = [r["hang_to_declared_s"] for r in runs if r["hang_to_declared_s"] is not None]
    back = [r["declared_to_training_s"] for r in runs if r["declared_to_training_s"] is not None]
    commit = subprocess.run(["git", "-C", str(TOP), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    result = {
        "command": "python bench/stall_detection.py " + " ".join(sys.argv[1:]),
        "operator_commit": commit,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": {k: v for k, v in vars(args).items() if k != "out"},
        "named_correctly": f"{sum(r['named'] for r in runs)}/{len(runs)}",
        "succeeded": f"{sum(r['phase'] == 'Succeeded' for r in runs)}/{len(runs)}",
        "hang_to_declared_s": {
            "median": statistics.median(detect) if detect else None,
            "max": max(detect, default=None),
            "deadline_s": args.deadline,
        },
        "declared_to_training_s": {
            "median": statistics.median(back) if back else None,
            "max": max(back, default=None),
        },
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "note": "the real node shares the machine"},
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
