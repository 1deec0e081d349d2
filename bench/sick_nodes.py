"""Goodput on a cluster with sick nodes, with and without node avoidance (issue 36).

    python bench/sick_nodes.py [--jobs 1000] [--sick 3] [--fault-mean-s 1200]

The trace and cluster of bench/placement.py (1,000 jobs, 64 nodes x 8 GPUs, 0.9 offered
load), fixed-size gangs admitted by the operator's own decide() (bench/elastic_sim.py), and
`--sick` nodes whose gangs fail: a gang with a pod on a sick node faults after an
exponential time of mean `--fault-mean-s`, losing the work since its last checkpoint (every
`--checkpoint-s` of progress), and is admitted again after the restart's cost. Without
avoidance the next gang goes wherever the placement puts it, often the same node (the
placement is deterministic). With it, as the operator does (policies/node_blame.py): the
job's next gangs keep off the node for `--avoid-s`, and a node that `--suspect-jobs` jobs
avoid at once is kept off by every job. Goodput is the trace's useful GPU-seconds (each
job's run time x its GPUs) over the GPU-seconds pods held. Writes
bench/results/sick_nodes.json.
"""

from __future__ import annotations

import json
import random
import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from elastic_sim import Life, Sim
from placement import (
    GPUS_PER_NODE,
    NODES,
    SEED,
    TOP,
    git_commit,
    machine,
    make_trace,
    trace_facts,
    trace_parameters,
)

from dtjob_operator.admission.snapshot import JobView

RESULTS = TOP / "bench" / "results" / "sick_nodes.json"
RESTART_S, DRAIN_S = 120.0, 30.0


@dataclass
class SickSim(Sim):
    sick: frozenset[str] = frozenset()
    fault_mean_s: float = 1200.0
    checkpoint_s: float = 600.0
    avoid: bool = False
    avoid_s: float = 3600.0
    suspect_jobs: int = 2
    seed: int = 0
    rng: random.Random = field(default_factory=random.Random)
    avoided: dict[str, dict[str, float]] = field(default_factory=dict)
    """job -> node -> until."""
    faults: int = 0
    lost_work_s: float = 0.0
    """GPU-seconds of progress thrown away (since the last checkpoint) by faults."""
    faulted_jobs: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.rng = random.Random(self.seed)

    def resume(self, life: Life, now: float) -> None:
        super().resume(life, now)
        if self.sick.intersection(life.nodes):
            fault = now + self.rng.expovariate(1.0 / self.fault_mean_s)
            end = now + life.work_left * life.job.pods / life.size
            if fault < end:
                self.push(fault, "fault", life.uid, life.epoch)

    def on_event(self, kind: str, life: Life, token: int, now: float) -> None:
        if kind == "fault" and token == life.epoch and life.progress_from is not None:
            self.fault(life, now)

    def fault(self, life: Life, now: float) -> None:
        """The gang fails: progress since its last checkpoint is lost, its pods go, and it
        is admitted again (a restart after a failure, placed anew)."""
        self.faults += 1
        self.faulted_jobs.add(life.uid)
        assert life.progress_from is not None
        ran = now - life.progress_from
        kept = (ran // self.checkpoint_s) * self.checkpoint_s
        self.lost_work_s += (ran - kept) * life.size * life.job.gpus
        node = next(n for n in life.nodes if n in self.sick)
        life.progress_from = now - kept  # stop() keeps what was checkpointed
        self.stop(life, now)
        life.state, life.size, life.resize_to = "waiting", 0, None
        self.forget(life)
        if self.avoid:
            self.avoided.setdefault(life.uid, {})[node] = now + self.avoid_s

    def suspects(self, now: float) -> set[str]:
        named: dict[str, int] = {}
        for nodes in self.avoided.values():
            for node, until in nodes.items():
                if until > now:
                    named[node] = named.get(node, 0) + 1
        return {n for n, jobs in named.items() if jobs >= self.suspect_jobs}

    def view(self, life: Life) -> JobView:
        base = super().view(life)
        if not self.avoid or life.state != "waiting":
            return base
        now = self.clock
        own = {n for n, until in self.avoided.get(life.uid, {}).items() if until > now}
        keep_off = frozenset(own | self.suspects(now))
        if not keep_off:
            return base
        return replace(base, gang=tuple(replace(p, avoid=keep_off) for p in base.gang))


def figures(sim: SickSim, wall: float) -> dict[str, Any]:
    useful = sum(j.runtime * j.pods * j.gpus for j in sim.trace)
    finished = [life for life in sim.lives.values() if life.finished_at is not None]
    jct = [life.finished_at - life.job.arrival for life in finished if life.finished_at]
    return {
        "goodput": round(useful / sim.held_s, 4) if sim.held_s else None,
        "faults": sim.faults,
        "jobs_with_faults": len(sim.faulted_jobs),
        "lost_work_gpu_hours": round(sim.lost_work_s / 3600, 1),
        "held_gpu_hours": round(sim.held_s / 3600, 1),
        "useful_gpu_hours": round(useful / 3600, 1),
        "mean_completion_h": round(sum(jct) / len(jct) / 3600, 2) if jct else None,
        "makespan_h": round(sim.done_at / 3600, 1),
        "jobs_finished": len(finished),
        "overcommits": len(sim.overcommits),
        "sim_wall_s": round(wall, 1),
    }


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--sick", type=int, default=3, help="sick nodes, of 64")
    parser.add_argument("--fault-mean-s", type=float, default=1200.0)
    parser.add_argument("--checkpoint-s", type=float, default=600.0)
    parser.add_argument("--avoid-s", type=float, default=3600.0)
    parser.add_argument("--suspect-jobs", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    trace = make_trace(args.jobs, args.seed)
    sick = frozenset(
        f"node-{k:02d}" for k in random.Random(args.seed + 7).sample(range(NODES), args.sick)
    )
    runs: dict[str, dict[str, Any]] = {}
    for name, avoid in (("healthy", False), ("no_avoidance", False), ("avoidance", True)):
        sim = SickSim(
            name, trace, False, {}, False, RESTART_S, DRAIN_S,
            sick=frozenset() if name == "healthy" else sick, fault_mean_s=args.fault_mean_s,
            checkpoint_s=args.checkpoint_s, avoid=avoid, avoid_s=args.avoid_s,
            suspect_jobs=args.suspect_jobs, seed=args.seed + 11,
        )  # fmt: skip
        t0 = time.perf_counter()
        sim.run()
        runs[name] = figures(sim, time.perf_counter() - t0)
    result = {
        "command": " ".join(["python bench/sick_nodes.py", shlex.join(sys.argv[1:])]).strip(),
        "operator_commit": git_commit(),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": {
            **trace_parameters(args.seed, args.jobs),
            "gpus": NODES * GPUS_PER_NODE,
            "sick_nodes": sorted(sick),
            "fault": "a gang with a pod on a sick node faults after Exp(mean fault_mean_s)",
            "fault_mean_s": args.fault_mean_s,
            "checkpoint_s": args.checkpoint_s,
            "avoid_s": args.avoid_s,
            "suspect_jobs": args.suspect_jobs,
            "restart_s": RESTART_S,
            "drain_s": DRAIN_S,
        },
        "trace": trace_facts(trace),
        "runs": runs,
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for name, r in runs.items():
        print(
            f"{name:13} goodput {r['goodput']:.3f}  faults {r['faults']:4}  lost work "
            f"{r['lost_work_gpu_hours']:7.1f} GPU-h  mean completion {r['mean_completion_h']} h"
        )
    print(f"wall {result['wall_s']} s; {RESULTS.relative_to(TOP)}")


if __name__ == "__main__":
    main()
