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
import heapq
import json
import random
import shlex
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement import (
    EPOCH,
    GPUS_PER_NODE,
    LEVELS,
    NODES,
    SEED,
    TOP,
    TraceJob,
    admitted_in_order,
    cluster,
    git_commit,
    machine,
    make_trace,
    p90,
    summary,
    trace_facts,
    trace_parameters,
    waiting_view,
)

from dtjob_operator.admission.decide import Decisions, decide
from dtjob_operator.admission.fit import Node
from dtjob_operator.admission.resources import GPU
from dtjob_operator.admission.snapshot import JobView, Snapshot

RESULTS = TOP / "bench" / "results" / "elastic.json"
COOLDOWN_S, MAX_RESIZES = 600.0, 10  # runPolicy.elastic's defaults
RESTART_S, DRAIN_S = 120.0, 30.0
HIGH_SHARE = 0.05
TOTAL_GPUS = NODES * GPUS_PER_NODE


def at(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


@dataclass
class Life:
    """A job's life in the simulation."""

    job: TraceJob
    least: int | None
    """minReplicas of an elastic job, else None."""
    priority: int
    state: str = "waiting"
    """waiting, running (its pods bound), resizing (old pods going, the new gang not
    created), restarted (old pods gone, the new gang not refitted yet)."""
    size: int = 0
    nodes: tuple[str, ...] = ()
    """The node of each pod of the current gang, by rank."""
    old: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Pods being deleted: batch -> their nodes."""
    generation: int = 0
    epoch: int = 0
    """Bumped when it stops: its scheduled resume and end no longer hold."""
    work_left: float = 0.0
    """Seconds of work left at its maximum size."""
    progress_from: float | None = None
    """Progressing at `size` since then (None: not progressing)."""
    resize_to: int | None = None
    """A resize decided before it progressed: done once it does."""
    admitted_at: float | None = None
    first_size: int = 0
    """The size it was first admitted at."""
    start_time: float | None = None
    """status.startTime: its gang's first creation (reset by a preemption)."""
    last_resize: float | None = None
    resizes: list[tuple[float, int, int]] = field(default_factory=list)
    """(when, from, to)."""
    preemptions: int = 0
    releases: int = 0
    finished_at: float | None = None
    sizes_seen: set[int] = field(default_factory=set)
    size_seconds: float = 0.0
    """Sum of size x seconds progressing."""
    progress_seconds: float = 0.0

    @property
    def uid(self) -> str:
        return self.job.uid

    @property
    def completion(self) -> float:
        return (self.finished_at or 0.0) - self.job.arrival

    def held(self) -> tuple[tuple[str | None, dict[str, int]], ...]:
        pods = [n for batch in self.old.values() for n in batch] + list(self.nodes)
        return tuple((n, {GPU: self.job.gpus}) for n in pods)


@dataclass
class Sim:
    name: str
    trace: Sequence[TraceJob]
    elastic: bool
    priorities: dict[str, int]
    preemption: bool
    restart_s: float
    drain_s: float
    nodes: list[Node] = field(default_factory=cluster)
    free: dict[str, int] = field(default_factory=dict)
    lives: dict[str, Life] = field(default_factory=dict)
    live: dict[str, Life] = field(default_factory=dict)
    """Arrived, not finished."""
    events: list[tuple[float, int, str, str, int]] = field(default_factory=list)
    seq: int = 0
    growable_since: dict[str, float] = field(default_factory=dict)
    kept: dict[str, dict[str, str]] = field(default_factory=dict)
    timers: set[float] = field(default_factory=set)
    pass_seconds: list[float] = field(default_factory=list)
    overcommits: list[str] = field(default_factory=list)
    """Pods that decide() placed on a node without room for them (operator bug)."""
    late_growth: int = 0
    """Growable jobs whose cooldown was over at a pass that did not grow them (a bug)."""
    whole_preemptions: int = 0
    shrinks: int = 0
    held_s: float = 0.0
    """GPU-seconds held by pods."""
    idle_s: float = 0.0
    """GPU-seconds held by pods of jobs not progressing (draining, restarting)."""
    held_arriving_s: float = 0.0
    """GPU-seconds held until the last arrival."""
    clock: float = 0.0
    done_at: float = 0.0

    def __post_init__(self) -> None:
        self.free = {n.name: n.allocatable[GPU] for n in self.nodes}
        for job in self.trace:
            least = job.pods // 2 if self.elastic and job.pods > 1 else None
            life = Life(job, least, self.priorities.get(job.uid, 0), work_left=job.runtime)
            self.lives[job.uid] = life

    def push(self, when: float, kind: str, uid: str, token: int = 0) -> None:
        # Whole milliseconds: a cooldown's end compares exactly as datetimes.
        self.seq += 1
        heapq.heappush(self.events, (round(when, 3), self.seq, kind, uid, token))

    def run(self) -> None:
        for job in self.trace:
            self.push(job.arrival, "arrive", job.uid)
        last_arrival = self.trace[-1].arrival
        while self.events:
            now = self.events[0][0]
            self.account(now, last_arrival)
            timer = False
            while self.events and self.events[0][0] == now:
                _, _, kind, uid, token = heapq.heappop(self.events)
                life = self.lives[uid] if uid else None
                if kind == "arrive" and life is not None:
                    self.live[uid] = life
                elif kind == "drained" and life is not None:
                    self.drained(life, token)
                elif kind == "resume" and life is not None and token == life.epoch:
                    self.resume(life, now)
                elif kind == "end" and life is not None and token == life.epoch:
                    self.finish(life, now)
                elif kind == "timer":
                    timer = True
                    self.timers.discard(now)
            if timer or any(self.needs_pass(life) for life in self.live.values()):
                self.admission_pass(now)
            else:
                self.growable_since = {}  # what a pass would keep: nothing is growable

    def needs_pass(self, life: Life) -> bool:
        """Something a pass could decide on: a job waiting, a gang to refit, a job that
        may grow."""
        return life.state in ("waiting", "restarted") or self.growth(life)[0] is not None

    def account(self, now: float, last_arrival: float) -> None:
        dt = now - self.clock
        if dt > 0:
            held = TOTAL_GPUS - sum(self.free.values())
            idle = sum(
                len(life.held()) * life.job.gpus - (life.progress_from is not None) *
                len(life.nodes) * life.job.gpus
                for life in self.live.values()
            )  # fmt: skip
            self.held_s += held * dt
            self.idle_s += idle * dt
            self.held_arriving_s += held * max(0.0, min(now, last_arrival) - self.clock)
        self.clock = now

    # -- the views a pass reads ----------------------------------------------------------

    def growth(self, life: Life) -> tuple[int | None, datetime | None, float]:
        """snapshot._growth: (elastic_max, resizable_at, cooldown) of an admitted elastic
        job that may still grow."""
        if life.least is None or life.state == "waiting" or life.size >= life.job.pods:
            return None, None, 0.0
        if len(life.resizes) >= MAX_RESIZES:
            return None, None, 0.0
        since = life.last_resize if life.last_resize is not None else life.start_time
        return life.job.pods, (at(since + COOLDOWN_S) if since is not None else None), COOLDOWN_S

    def view(self, life: Life) -> JobView:
        base = replace(waiting_view(life.job, None), priority=life.priority, held=life.held())
        if life.state == "waiting":
            return replace(base, elastic_min=life.least)
        gang, names = base.gang[: life.size], base.pod_names[: life.size]
        most, resizable_at, cooldown = self.growth(life)
        # snapshot.job_view: above its minimum, and resizes left (else it keeps its size).
        least = life.least if life.least is not None and life.least < life.size else None
        least = least if len(life.resizes) < MAX_RESIZES else None
        admitted = replace(
            base, gang=gang, pod_names=names, admitted=True, elastic_min=least,
            elastic_max=most, resizable_at=resizable_at, cooldown=cooldown,
        )  # fmt: skip
        if life.state == "running":
            return replace(admitted, pod_nodes=life.nodes)
        unbound = (None,) * life.size
        missing = replace(admitted, missing=gang, missing_names=names, pod_nodes=unbound)
        if life.state == "resizing":
            return replace(missing, draining=True)
        return replace(missing, restarted=life.generation)  # restarted

    def snapshot(self, now: float) -> Snapshot:
        nodes = [Node(n.name, n.allocatable, {GPU: self.free[n.name]}, n.labels)
                 for n in self.nodes]  # fmt: skip
        return Snapshot(
            jobs=[self.view(life) for life in self.live.values()],
            quotas={},
            nodes=nodes,
            now=at(now),
            topology_levels=LEVELS,
            growable_since={uid: at(s) for uid, s in self.growable_since.items()},
            kept={uid: dict(where) for uid, where in self.kept.items()},
        )

    # -- one pass --------------------------------------------------------------------------

    def admission_pass(self, now: float) -> None:
        snap = self.snapshot(now)
        t0 = time.perf_counter()
        decisions = decide(snap, preemption=self.preemption)
        self.pass_seconds.append(time.perf_counter() - t0)
        # What the AdmissionBook keeps (book.AdmissionBook.record).
        self.growable_since = {uid: self.growable_since.get(uid, now) for uid in decisions.growable}
        for uid, where in decisions.placements.items():
            self.kept.setdefault(uid, {}).update(where)
        for uid in decisions.release:
            self.release(self.lives[uid])
        for uid in decisions.refit:
            self.refit(self.lives[uid], decisions.placements[uid], now)
        for uid in admitted_in_order(decisions):
            life = self.lives[uid]
            self.admit(life, decisions.sizes.get(uid, life.job.pods), decisions, now)
        for uid in decisions.preempt:
            self.preempt(self.lives[uid], now)
        for uid, (size, _why) in decisions.resize.items():
            if uid not in decisions.preempt:
                self.resize(self.lives[uid], size, now)
        self.arm_timer(decisions, now)

    def arm_timer(self, decisions: Decisions, now: float) -> None:
        """A pass when the first growable job's cooldown is over (the operator's timer)."""
        due = []
        for uid in decisions.growable:
            if uid in decisions.resize:
                continue
            _, resizable_at, _ = self.growth(self.lives[uid])
            if resizable_at is None:
                continue
            ready = max((resizable_at - EPOCH).total_seconds(),
                        self.growable_since[uid] + COOLDOWN_S)  # fmt: skip
            if ready <= now:
                self.late_growth += 1
            else:
                due.append(round(ready, 3))
        if due and min(due) not in self.timers:
            self.timers.add(min(due))
            self.push(min(due), "timer", "")

    def bind(self, life: Life, where: dict[str, str]) -> None:
        names = waiting_view(life.job, None).pod_names[: life.size]
        life.nodes = tuple(where[name] for name in names)
        for name, node in zip(names, life.nodes, strict=True):
            if self.free[node] < life.job.gpus:
                self.overcommits.append(f"{life.uid}/{name} on {node}")
            self.free[node] -= life.job.gpus
        life.state = "running"
        life.sizes_seen.add(life.size)

    def admit(self, life: Life, size: int, decisions: Decisions, now: float) -> None:
        life.size = size
        self.bind(life, decisions.placements[life.uid])
        if life.admitted_at is None:
            life.admitted_at, life.first_size = now, size
        if life.start_time is None:
            life.start_time = now
        resumed = life.work_left < life.job.runtime  # from a checkpoint
        self.start_after(life, self.restart_s - self.drain_s if resumed else 0.0, now)

    def refit(self, life: Life, where: dict[str, str], now: float) -> None:
        self.bind(life, where)
        self.start_after(life, self.restart_s - self.drain_s, now)

    def start_after(self, life: Life, delay: float, now: float) -> None:
        if delay <= 0:
            self.resume(life, now)
        else:
            self.push(now + delay, "resume", life.uid, life.epoch)

    def resume(self, life: Life, now: float) -> None:
        life.progress_from = now
        self.push(now + life.work_left * life.job.pods / life.size, "end", life.uid, life.epoch)
        if life.resize_to is not None:
            size, life.resize_to = life.resize_to, None
            if size != life.size:
                self.resize(life, size, now)

    def stop(self, life: Life, now: float) -> None:
        """SIGTERM: the work so far is kept, the pods go after drain_s."""
        if life.progress_from is not None:
            ran = now - life.progress_from
            life.work_left = max(0.0, life.work_left - ran * life.size / life.job.pods)
            life.size_seconds += ran * life.size
            life.progress_seconds += ran
        life.progress_from = None
        life.epoch += 1
        life.generation += 1
        batch = life.generation
        life.old[batch], life.nodes = life.nodes, ()
        self.push(now + self.drain_s, "drained", life.uid, batch)

    def resize(self, life: Life, size: int, now: float) -> None:
        if life.progress_from is None:  # not Running yet: the lifecycle waits for it
            life.resize_to = size
            return
        if size < life.size:
            self.shrinks += 1
        life.resizes.append((now, life.size, size))
        life.last_resize = now
        self.stop(life, now)
        life.size, life.state = size, "resizing"

    def preempt(self, life: Life, now: float) -> None:
        self.whole_preemptions += 1
        life.preemptions += 1
        self.stop(life, now)
        life.state, life.size, life.start_time, life.resize_to = "waiting", 0, None, None
        self.forget(life)

    def release(self, life: Life) -> None:
        life.releases += 1
        life.state, life.size = "waiting", 0
        self.forget(life)

    def drained(self, life: Life, batch: int) -> None:
        for node in life.old.pop(batch):
            self.free[node] += life.job.gpus
        if life.state == "resizing" and not life.old:
            life.state = "restarted"

    def finish(self, life: Life, now: float) -> None:
        """Its pods succeed: their GPUs are free at once."""
        if life.progress_from is not None:
            life.size_seconds += (now - life.progress_from) * life.size
            life.progress_seconds += now - life.progress_from
        for node in life.nodes:
            self.free[node] += life.job.gpus
        life.nodes, life.progress_from, life.work_left = (), None, 0.0
        life.finished_at = now
        life.state = "done"
        del self.live[life.uid]
        self.forget(life)
        self.done_at = max(self.done_at, now)

    def forget(self, life: Life) -> None:
        self.kept.pop(life.uid, None)
        self.growable_since.pop(life.uid, None)


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
