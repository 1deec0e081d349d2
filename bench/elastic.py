"""Elastic jobs benchmark (issue 29, docs/design/elastic.md step 9), writing
bench/results/elastic.json: one trace replayed with fixed-size gangs and with elastic ones.

The cluster, the trace and the admission are bench/placement.py's (imported from it): 64
nodes x 8 GPUs in 8 racks and 2 blocks, 1,000 jobs at seed 28 (1, 2, 4 or 8 GPUs on one
node, gangs of 2, 4 or 8 pods x 8 GPUs, run times log-uniform from 10 minutes to 8 hours,
Poisson arrivals at 90% offered load, 4 namespaces without quotas), the real pure
`decide()` at every instant where something changes, with placement.py's `topology` levels
(block, rack, hostname) and every pod bound where the pass placed it. Runs, on the same
trace, where only elasticity differs:
- `fixed`: every job runs at its size. At one priority this is placement.py's `topology`
  run, and gives its figures (a check of this harness).
- `elastic`: the multi-node gangs are data-parallel with minReplicas = replicas // 2 (2 ->
  1, 4 -> 2, 8 -> 4 pods) and runPolicy.elastic at its defaults (cooldownSeconds 600,
  maxResizes 10); the single-node jobs stay fixed.

The model:
- Work: a job's trace run time is at its maximum size N; at n workers it progresses at
  rate n/N. Linear scaling: real data-parallel scaling is sublinear, so this is elastic's
  best case (half the workers take twice as long, no more), and the work in GPU-hours is
  the same in both runs.
- A resize (decide's `Decisions.resize`) stops the job where it is (SIGTERM: a
  checkpoint, no work lost); its old pods hold their GPUs for --drain-s (30 s) while its
  new gang is missing (the view is `draining`); once they are gone a pass refits the gang
  at its new size (decide's step 0, `Decisions.refit`) and its pods are bound there, holding
  the new size's GPUs; it progresses again --restart-s (120 s) after the resize (pods
  created, rendezvous, resume). A gang that no longer fits at the refit is released back
  to the queue (counted). A job resumed after a preemption or a release pays the same
  --restart-s less --drain-s; a job's first start costs nothing, in both runs.
- The views are as snapshot.job_view builds them: an admitted elastic job below its
  maximum with fewer than maxResizes resizes has elastic_max, resizable_at (its last
  resize, else its start, + cooldown) and cooldown (every elastic job has a checkpoint
  claim, which growth needs); elastic_min while above its minimum with resizes left;
  pod_nodes. What the controller's AdmissionBook keeps between passes is carried the same
  way: growable_since from Decisions.growable (kept while the job stays growable, dropped
  at the first pass where it is not), the placements given (Snapshot.kept), both forgotten
  when a job ends, is preempted or released. A resize decided while the job is not
  progressing yet is applied when it is (lifecycle._resizable: a Running gang).
- Passes: at every instant where a job arrives or ends, or old pods are gone, and, for
  growth, at the instant where a growable job's cooldown is over (the operator's timer
  passes come every resync_seconds, 10 s: growth comes up to 10 s later there).
- Priorities: with one priority (0) for all there is nothing to preempt, and a job
  shrinks only for a higher-priority one (decide's preemption), so no job ever shrinks;
  the scenario `one_priority` is that. The scenario `preemption` draws --high-share (5%)
  of the jobs at priority 1 (another random stream: the trace is the same) and runs
  decide(preemption=True) in both runs: a priority-1 job that does not fit stops whole
  priority-0 jobs of its namespace in the fixed run, shrinks elastic ones first in the
  elastic run. A preempted job keeps its progress (a checkpoint), its pods hold their GPUs
  for --drain-s, and it queues again; a pass may admit it while they drain (the operator
  would create its pods once they are gone, at most --drain-s later).

Per run: utilisation (the trace's GPU-hours over 512 GPUs x the makespan, and the
GPU-hours held, restarts included, over the same, and while jobs arrive), mean, p90 and
max completion time (end - arrival) and queue wait (first admission - arrival), the mean
completion by shape, the resizes per elastic job (grows, shrinks, distribution), whole
preemptions, jobs never finished, and, elastic against fixed, each job's completion time
(the slowest relative to fixed, the jobs slower by more than 10%).

Usage: python bench/elastic.py [--jobs N] [--seed S] [--restart-s S] [--drain-s S]
       [--high-share F] (0: the one-priority scenario alone)
1,000 jobs take about 3 minutes on 2 cores, most of it in the decide() calls of the elastic
runs (p50 ~2.5x the fixed runs'): elastic.sized tries the sizes of each waiting elastic job
the pass reaches (not one behind a blocked queue), from its maximum down, skipping the gang
shapes that already found no room in the pass, and a failed placement at 64 nodes with
levels costs the most (topology._spread).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from elastic_sim import COOLDOWN_S, DRAIN_S, MAX_RESIZES, RESTART_S, TOTAL_GPUS, Life, Sim
from placement import (
    SEED,
    TOP,
    TraceJob,
    git_commit,
    machine,
    make_trace,
    p90,
    summary,
    trace_facts,
    trace_parameters,
)

RESULTS = TOP / "bench" / "results" / "elastic.json"
HIGH_SHARE = 0.05


# -- figures -------------------------------------------------------------------------------


def stats(samples: Sequence[float]) -> dict[str, float]:
    out = summary(samples)
    out["max"] = round(max(samples), 1) if samples else 0.0
    return out


def shape(job: TraceJob) -> str:
    return f"{job.pods}x{job.gpus}"


def figures(sim: Sim, wall: float) -> dict[str, Any]:
    lives = list(sim.lives.values())
    done = [life for life in lives if life.finished_at is not None]
    makespan = sim.done_at - min(life.job.arrival for life in lives)
    work = sum(life.job.pods * life.job.gpus * life.job.runtime for life in lives)
    last_arrival = max(life.job.arrival for life in lives)
    elastic = [life for life in lives if life.least is not None]
    counts = [len(life.resizes) for life in elastic]
    by_shape: dict[str, list[float]] = {}
    for life in done:
        by_shape.setdefault(shape(life.job), []).append(life.completion)
    out: dict[str, Any] = {
        "makespan_hours": round(makespan / 3600, 2),
        "utilisation": round(work / (TOTAL_GPUS * makespan), 4),
        "gpu_hours_held": round(sim.held_s / 3600, 1),
        "held_utilisation": round(sim.held_s / (TOTAL_GPUS * makespan), 4),
        "held_utilisation_while_jobs_arrive": round(
            sim.held_arriving_s / (TOTAL_GPUS * last_arrival), 4
        ),
        "gpu_hours_held_not_progressing": round(sim.idle_s / 3600, 1),
        "completion_s": stats([life.completion for life in done]),
        "queue_wait_s": stats([(life.admitted_at or 0) - life.job.arrival for life in lives]),
        "mean_completion_s_by_shape": {
            k: round(statistics.fmean(v), 1) for k, v in sorted(by_shape.items())
        },
        "jobs_never_finished": [life.uid for life in lives if life.finished_at is None],
        "whole_preemptions": sim.whole_preemptions,
        "releases_at_refit": sum(life.releases for life in lives),
        "placements_on_a_full_node": len(sim.overcommits),
        "decide": {
            "passes": len(sim.pass_seconds),
            "p50_ms": round(1000 * statistics.median(sim.pass_seconds), 2),
            "p90_ms": round(1000 * p90(sim.pass_seconds), 2),
            "max_ms": round(1000 * max(sim.pass_seconds), 2),
        },
        "simulation_wall_s": round(wall, 1),
    }
    if elastic:
        dist: dict[str, int] = {}
        for n in counts:
            dist[str(n)] = dist.get(str(n), 0) + 1
        grows = sum(1 for life in elastic for _, a, b in life.resizes if b > a)
        out["elastic"] = {
            "jobs": len(elastic),
            "resizes": sum(counts),
            "grows": grows,
            "shrinks": sim.shrinks,
            "resizes_per_job": {"mean": round(statistics.fmean(counts), 2), "max": max(counts)},
            "jobs_by_resizes": dict(sorted(dist.items(), key=lambda kv: int(kv[0]))),
            "jobs_at_max_resizes": sum(1 for n in counts if n >= MAX_RESIZES),
            "admitted_below_max": sum(1 for life in elastic if life.first_size < life.job.pods),
            "never_at_max": sum(1 for life in elastic if life.job.pods not in life.sizes_seen),
            "mean_size_share_while_progressing": round(
                sum(life.size_seconds / life.job.pods for life in elastic)
                / sum(life.progress_seconds for life in elastic),
                4,
            ),
            "growth_due_but_not_grown": sim.late_growth,
        }
    return out


def compare(fixed: Sim, elastic: Sim) -> dict[str, Any]:
    """Each job's completion, elastic against fixed."""
    ratios = []
    for uid, a in fixed.lives.items():
        b = elastic.lives[uid]
        if a.finished_at is not None and b.finished_at is not None:
            ratios.append((b.completion / a.completion, uid))
    ratios.sort()
    worst = ratios[-1]
    a, b = fixed.lives[worst[1]], elastic.lives[worst[1]]

    def wait(life: Life) -> float:
        return (life.admitted_at or 0) - life.job.arrival

    def slowest(sim: Sim) -> float:
        return max((life.completion for life in sim.lives.values()), default=0.0)

    return {
        "jobs_slower_by_more_than_10pct": sum(1 for r, _ in ratios if r > 1.1),
        "jobs_faster_by_more_than_10pct": sum(1 for r, _ in ratios if r < 1 / 1.1),
        "completion_ratio": {
            "median": round(statistics.median(r for r, _ in ratios), 3),
            "p90": round(p90([r for r, _ in ratios]), 3),
            "max": round(worst[0], 3),
        },
        "slowest_relative_to_fixed": {
            "job": worst[1],
            "shape": shape(a.job),
            "completion_s_fixed": round(a.completion, 1),
            "completion_s_elastic": round(b.completion, 1),
        },
        "max_wait_s": {
            "fixed": round(max(map(wait, fixed.lives.values())), 1),
            "elastic": round(max(map(wait, elastic.lives.values())), 1),
        },
        "slowest_completion_s": {
            "fixed": round(slowest(fixed), 1),
            "elastic": round(slowest(elastic), 1),
        },
    }


def table(scenarios: dict[str, dict[str, Any]]) -> Iterable[str]:
    yield (f"{'scenario/run':<20} {'util':>6} {'JCT mean/max s':>14} {'wait p90/max s':>14} "
           f"{'resizes/job':>11} {'grow/shrink':>11} {'stops':>5} {'unfinished':>10}")  # fmt: skip
    for scenario, runs in scenarios.items():
        for name, f in runs["runs"].items():
            e = f.get("elastic")
            per_job = (
                f"{e['resizes_per_job']['mean']:.2f}/{e['resizes_per_job']['max']}" if e else "-"
            )
            kinds = f"{e['grows']}/{e['shrinks']}" if e else "-"
            jct = f"{f['completion_s']['mean']:.0f}/{f['completion_s']['max']:.0f}"
            wait = f"{f['queue_wait_s']['p90']:.0f}/{f['queue_wait_s']['max']:.0f}"
            yield (f"{scenario + '/' + name:<20} {f['utilisation']:>6.1%} {jct:>14} {wait:>14} "
                   f"{per_job:>11} {kinds:>11} {f['whole_preemptions']:>5} "
                   f"{len(f['jobs_never_finished']):>10}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--restart-s", type=float, default=RESTART_S)
    parser.add_argument("--drain-s", type=float, default=DRAIN_S)
    parser.add_argument("--high-share", type=float, default=HIGH_SHARE)
    args = parser.parse_args()
    started = time.perf_counter()
    trace = make_trace(args.jobs, args.seed)
    rng = random.Random(args.seed + 1)
    high = {job.uid: 1 for job in trace if rng.random() < args.high_share}
    plans: list[tuple[str, dict[str, int], bool]] = [("one_priority", {}, False)]
    if args.high_share > 0:
        plans.append(("preemption", high, True))
    scenarios: dict[str, dict[str, Any]] = {}
    for scenario, priorities, preemption in plans:
        sims = {}
        for name, is_elastic in (("fixed", False), ("elastic", True)):
            sim = Sim(name, trace, is_elastic, priorities, preemption, args.restart_s, args.drain_s)
            t0 = time.perf_counter()
            sim.run()
            sims[name] = (sim, time.perf_counter() - t0)
        scenarios[scenario] = {
            "high_priority_jobs": len(priorities),
            "preemption": preemption,
            "runs": {name: figures(sim, wall) for name, (sim, wall) in sims.items()},
            "elastic_against_fixed": compare(sims["fixed"][0], sims["elastic"][0]),
        }
    result = {
        "command": " ".join(["python bench/elastic.py", shlex.join(sys.argv[1:])]).strip(),
        "operator_commit": git_commit(),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": {
            **trace_parameters(args.seed, args.jobs),
            "elastic_min": "replicas // 2 for the multi-node gangs; single-node jobs fixed",
            "scaling": "linear: n of N workers progress at n/N",
            "cooldown_s": COOLDOWN_S,
            "max_resizes": MAX_RESIZES,
            "restart_s": args.restart_s,
            "drain_s": args.drain_s,
            "high_priority_share": args.high_share,
        },
        "trace": trace_facts(trace),
        "scenarios": scenarios,
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(table(scenarios)))
    print(f"wall {result['wall_s']} s; {RESULTS.relative_to(TOP)}")


if __name__ == "__main__":
    main()
