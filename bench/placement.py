"""Placement benchmark (issue 28, docs/design/topology-admission.md step 7), writing
bench/results/placement.json: where the admitted gangs' pods land, today and with topology.

The cluster: 64 nodes x 8 GPUs, 8 racks of 8 nodes in 2 blocks (node labels
example.com/block, example.com/rack, kubernetes.io/hostname). The trace (one seed): jobs of
1, 2, 4 or 8 GPUs on one node and gangs of 2, 4 or 8 pods x 8 GPUs, run times log-uniform
from 10 minutes to 8 hours, Poisson arrivals at 90% offered load, in 4 namespaces without
quotas, all of priority 0. An event-driven simulation in simulated seconds runs one
admission pass, the real pure `decide(snapshot, preemption=False)`, at every instant where
something arrives or ends, over every job not finished (the operator runs a pass on every
change). Snapshots are built directly (JobView, Snapshot), not from API objects.

Policies, on the same trace:
- `today`: decide() with no topology levels says who is admitted (the queue: strict order
  per namespace), its placements are ignored, and a simulated kube-scheduler binds each pod
  on its own, in queue order then rank: NodeResourcesFit LeastAllocated on GPUs, the node
  with the most free GPUs among those that fit, ties by name (it spreads). A pod that fits
  nowhere stays Pending and is retried, oldest first, at every later instant; an admitted
  gang holds what its bound pods took, and runs (its run time starts) once all are bound.
  Its Pending pods are in the next passes' snapshots as unscheduled, as the operator sees
  them. On this branch decide() places every gang with topology.place_gang, also without
  levels, where main used fit.place (first fit decreasing): for gangs of equal pods, as
  here, both find a placement exactly when the nodes hold that many such pods, so they
  differ only in which node an earlier admission of the same pass is imagined on.
- `topology`: decide() with topology_levels (block, rack, hostname) and jobs without
  spec.placement (the gang packs at the lowest level that holds it), and every pod bound
  where `Decisions.placements` put it (the operator pins it there). A pod whose node has no
  room left would stay Pending on it (counted: the goal is none).
- `rack_required`: as `topology`, with the multi-node gangs asking for
  `required: example.com/rack`: what one rack for every gang costs in waiting. (Asking for
  a preferred rack is not run: it tries the same levels in the same order as no request,
  since a host cannot hold 2 x 8 GPUs, so it places the same; checked once at the default
  seed: the same admissions, starts and nodes.)

Per policy: the multi-node gangs inside one rack (every one of them fits a rack of 64
GPUs), utilisation (GPU-hours of the trace over 512 GPUs x the makespan), mean and p90
queue wait (admission - arrival) and start wait (start - arrival), gangs with a Pending pod
after admission, and the wall-clock time of the decide() calls (p50/p90 ms).

Usage: python bench/placement.py [--jobs N] [--seed S]
1,000 jobs take under a minute on 2 cores, most of it in the decide() calls of `topology`:
with levels, a gang that no rack holds is tried spread at every level (topology._spread).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "operator"))
sys.path.insert(0, str(TOP / "api"))

from dtjob_operator.admission.decide import Decisions, decide  # noqa: E402
from dtjob_operator.admission.fit import Node, PodDemand  # noqa: E402
from dtjob_operator.admission.resources import GPU  # noqa: E402
from dtjob_operator.admission.snapshot import JobView, Snapshot  # noqa: E402
from dtjob_operator.admission.topology import TopologyRequest, place_gang  # noqa: E402

RESULTS = TOP / "bench" / "results" / "placement.json"
BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
NODES, GPUS_PER_NODE, RACKS, BLOCKS = 64, 8, 8, 2
NAMESPACES = 4
# (pods, GPUs per pod, share of the jobs): mostly single-node jobs, a quarter gangs.
MIX = ((1, 1, 0.30), (1, 2, 0.15), (1, 4, 0.15), (1, 8, 0.15),
       (2, 8, 0.12), (4, 8, 0.08), (8, 8, 0.05))  # fmt: skip
RUNTIME_S = (600.0, 8 * 3600.0)
OFFERED_LOAD = 0.9
SEED = 28
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
LEVELS = (BLOCK, RACK, HOST)
# (name, topology levels, the multi-node gangs' request); see the module docstring.
POLICIES: tuple[tuple[str, tuple[str, ...], TopologyRequest | None], ...] = (
    ("today", (), None),
    ("topology", LEVELS, None),
    ("rack_required", LEVELS, TopologyRequest(RACK, required=True)),
)


@dataclass(frozen=True)
class TraceJob:
    index: int
    namespace: str
    arrival: float
    pods: int
    gpus: int
    """GPUs per pod."""
    runtime: float

    @property
    def uid(self) -> str:
        return f"job-{self.index:04d}"


def mean_runtime() -> float:
    """The mean of the log-uniform run time: (b - a) / ln(b / a)."""
    lo, hi = RUNTIME_S
    return (hi - lo) / math.log(hi / lo)


def arrival_rate() -> float:
    """Jobs per second that offer OFFERED_LOAD of the cluster's GPUs."""
    mean_gpus = sum(pods * gpus * share for pods, gpus, share in MIX)
    return OFFERED_LOAD * NODES * GPUS_PER_NODE / (mean_gpus * mean_runtime())


def make_trace(jobs: int, seed: int) -> list[TraceJob]:
    rng = random.Random(seed)
    rate, t, out = arrival_rate(), 0.0, []
    lo, hi = RUNTIME_S
    for i in range(jobs):
        t += rng.expovariate(rate)
        pods, gpus, _ = rng.choices(MIX, weights=[m[2] for m in MIX])[0]
        runtime = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        ns = f"team-{rng.randrange(NAMESPACES)}"
        out.append(TraceJob(i, ns, round(t, 1), pods, gpus, round(runtime, 1)))
    return out


def cluster() -> list[Node]:
    """The empty nodes, racks of consecutive nodes, blocks of consecutive racks."""
    per_rack, per_block = NODES // RACKS, RACKS // BLOCKS
    nodes = []
    for k in range(NODES):
        rack = k // per_rack
        labels = {BLOCK: f"block-{rack // per_block}", RACK: f"rack-{rack}", HOST: f"node-{k:02d}"}
        alloc = {GPU: GPUS_PER_NODE}
        nodes.append(Node(f"node-{k:02d}", alloc, dict(alloc), labels))
    return nodes


def waiting_view(job: TraceJob, request: TopologyRequest | None) -> JobView:
    stamp = (EPOCH + timedelta(seconds=job.arrival)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return JobView(
        uid=job.uid, namespace=job.namespace, name=job.uid, priority=0, created=stamp,
        gang=tuple(PodDemand({GPU: job.gpus}) for _ in range(job.pods)), admitted=False,
        pod_names=tuple(f"{job.uid}-worker-{r}" for r in range(job.pods)),
        topology=request,
    )  # fmt: skip


@dataclass
class Gang:
    """A job's life in the simulation."""

    job: TraceJob
    view: JobView
    admitted_at: float | None = None
    started_at: float | None = None
    bound: dict[str, str] = field(default_factory=dict)
    """pod name -> node."""
    bound_at: dict[str, float] = field(default_factory=dict)
    pending: dict[str, str | None] = field(default_factory=dict)
    """pod name -> the node it is pinned to (None: any), for pods not bound yet."""
    ever_pending: bool = False
    rack_had_room: bool = False
    """A rack could hold the whole gang when the pass that admitted it began."""

    def admitted_view(self) -> JobView:
        """As the next pass sees it: bound pods hold room, Pending ones are unscheduled."""
        demand = PodDemand({GPU: self.job.gpus})
        return replace(
            self.view,
            admitted=True,
            unscheduled=tuple(replace(demand, node_name=pin) for pin in self.pending.values()),
            held=tuple((node, {GPU: self.job.gpus}) for node in self.bound.values()),
        )


@dataclass
class Sim:
    policy: str
    levels: tuple[str, ...]
    gang_request: TopologyRequest | None = None
    """spec.placement.topology of the multi-node gangs (single-node jobs have none)."""
    nodes: list[Node] = field(default_factory=cluster)
    free: dict[str, int] = field(default_factory=dict)
    gangs: dict[str, Gang] = field(default_factory=dict)
    waiting: dict[str, Gang] = field(default_factory=dict)
    active: dict[str, Gang] = field(default_factory=dict)
    """Admitted, not finished."""
    queue: list[tuple[Gang, str]] = field(default_factory=list)
    """Pods not bound yet, oldest first."""
    events: list[tuple[float, int, str, str]] = field(default_factory=list)
    pass_seconds: list[float] = field(default_factory=list)
    pass_waiting: list[int] = field(default_factory=list)
    overcommits: list[str] = field(default_factory=list)
    """Pods that decide() placed on a node without room for them (operator bug)."""
    done_at: float = 0.0

    def __post_init__(self) -> None:
        self.free = {n.name: n.allocatable[GPU] for n in self.nodes}

    def run(self, trace: Sequence[TraceJob]) -> None:
        for job in trace:
            request = self.gang_request if job.pods > 1 else None
            self.gangs[job.uid] = Gang(job, waiting_view(job, request))
            heapq.heappush(self.events, (job.arrival, job.index, "arrive", job.uid))
        while self.events:
            now = self.events[0][0]
            while self.events and self.events[0][0] == now:
                _, _, kind, uid = heapq.heappop(self.events)
                if kind == "arrive":
                    self.waiting[uid] = self.gangs[uid]
                else:
                    self.finish(self.gangs[uid], now)
            self.schedule(now)  # what ended frees room for Pending pods first
            self.admission_pass(now)
            self.schedule(now)
        if self.waiting or self.active:
            raise RuntimeError(f"{self.policy}: stuck with {len(self.waiting)} waiting")

    def finish(self, gang: Gang, now: float) -> None:
        for node in gang.bound.values():
            self.free[node] += gang.job.gpus
        del self.active[gang.job.uid]
        self.done_at = max(self.done_at, now)

    def snapshot(self, now: float) -> Snapshot:
        nodes = [Node(n.name, n.allocatable, {GPU: self.free[n.name]}, n.labels)
                 for n in self.nodes]  # fmt: skip
        jobs = [g.view for g in self.waiting.values()]
        jobs += [g.admitted_view() for g in self.active.values()]
        when = EPOCH + timedelta(seconds=now)
        return Snapshot(jobs=jobs, quotas={}, nodes=nodes, now=when, topology_levels=self.levels)

    def admission_pass(self, now: float) -> None:
        if not self.waiting:
            return
        snap = self.snapshot(now)
        t0 = time.perf_counter()
        decisions = decide(snap, preemption=False)
        self.pass_seconds.append(time.perf_counter() - t0)
        self.pass_waiting.append(len(self.waiting))
        admitted = [self.waiting.pop(uid) for uid in admitted_in_order(decisions)]
        # The room as the pass saw it when it came to each admitted gang: the snapshot less
        # the placements of the gangs it admitted before (in queue order).
        seen = {n.name: Node(n.name, n.allocatable, dict(n.free), n.labels) for n in snap.nodes}
        for gang in admitted:
            gang.admitted_at = now
            if gang.job.pods > 1:
                in_rack = TopologyRequest(RACK, True)
                placed = place_gang(gang.view.gang, list(seen.values()), LEVELS, in_rack)
                gang.rack_had_room = placed is not None
            for node in decisions.placements.get(gang.job.uid, {}).values():
                seen[node].free[GPU] -= gang.job.gpus
            self.active[gang.job.uid] = gang
            # Today's pods are not pinned: the scheduler alone says where they go.
            pins = decisions.placements.get(gang.job.uid, {}) if self.levels else {}
            for name in gang.view.pod_names:
                gang.pending[name] = pins.get(name)
                self.queue.append((gang, name))

    def schedule(self, now: float) -> None:
        """Bind each queued pod, oldest first: a pinned one on its node if it has room (else
        it waits there), any other on the least allocated node that fits."""
        left = []
        for gang, name in self.queue:
            pin, need = gang.pending[name], gang.job.gpus
            if pin is None:
                node = least_allocated(self.free, need)
            else:
                node = pin if self.free[pin] >= need else None
            if node is None:
                if pin is not None and not gang.ever_pending:
                    self.overcommits.append(f"{gang.job.uid}/{name} on {pin}")
                gang.ever_pending = True
                left.append((gang, name))
                continue
            self.free[node] -= need
            del gang.pending[name]
            gang.bound[name], gang.bound_at[name] = node, now
            if not gang.pending:
                gang.started_at = now
                event = (now + gang.job.runtime, gang.job.index, "end", gang.job.uid)
                heapq.heappush(self.events, event)
        self.queue = left


def admitted_in_order(decisions: Decisions) -> list[str]:
    """The uids admitted, in the pass's queue order (verdicts are recorded in it)."""
    return [uid for uid, verdict in decisions.verdicts.items() if verdict.admit]


def least_allocated(free: dict[str, int], need: int) -> str | None:
    """kube-scheduler's default score on GPUs: the most free room among the nodes that fit,
    the first name among equals."""
    fits = [(-room, name) for name, room in free.items() if room >= need]
    return min(fits)[1] if fits else None


# -- figures -------------------------------------------------------------------------------


def p90(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[int(0.9 * (len(ordered) - 1))]


def summary(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        return {"mean": 0.0, "p90": 0.0}
    return {"mean": round(statistics.fmean(samples), 1), "p90": round(p90(samples), 1)}


def held_idle(gang: Gang) -> float:
    """GPU-seconds its bound pods held before the whole gang was bound (and ran)."""
    start = gang.started_at or 0.0
    return sum(gang.job.gpus * (start - at) for at in gang.bound_at.values())


def racks_of(gang: Gang, rack: dict[str, str]) -> set[str]:
    return {rack[node] for node in gang.bound.values()}


def figures(sim: Sim, wall: float) -> dict[str, Any]:
    gangs = list(sim.gangs.values())
    rack = {n.name: n.labels[RACK] for n in sim.nodes}
    block = {n.name: n.labels[BLOCK] for n in sim.nodes}
    multi = [g for g in gangs if g.job.pods > 1]
    fits_rack = [g for g in multi if g.job.pods * g.job.gpus <= GPUS_PER_NODE * NODES // RACKS]
    in_rack = [g for g in fits_rack if len(racks_of(g, rack)) == 1]
    in_block = [g for g in multi if len({block[n] for n in g.bound.values()}) == 1]
    room = [g for g in multi if g.rack_had_room]
    room_in_rack = [g for g in room if len(racks_of(g, rack)) == 1]
    first = min(g.job.arrival for g in gangs)
    makespan = sim.done_at - first
    work = sum(g.job.pods * g.job.gpus * g.job.runtime for g in gangs)
    pending = [g for g in gangs if g.ever_pending]
    return {
        "multi_node_gangs": len(multi),
        "multi_node_gangs_that_fit_one_rack": len(fits_rack),
        "multi_node_gangs_in_one_rack": len(in_rack),
        "share_in_one_rack": round(len(in_rack) / max(1, len(fits_rack)), 4),
        # The goal (>= 95 % of the gangs that fit in one rack), read as: of the
        # gangs admitted while some rack had room for them (when the pass came to them),
        # those placed in one rack. The others were admitted spread, when no rack had room.
        "multi_node_gangs_admitted_while_a_rack_had_room": len(room),
        "share_in_one_rack_of_those": round(len(room_in_rack) / max(1, len(room)), 4),
        "multi_node_gangs_in_one_block": len(in_block),
        "racks_per_multi_node_gang": summary([len(racks_of(g, rack)) for g in multi]),
        "makespan_hours": round(makespan / 3600, 2),
        "utilisation": round(work / (NODES * GPUS_PER_NODE * makespan), 4),
        "gpu_hours_held_by_gangs_not_yet_running": round(sum(map(held_idle, gangs)) / 3600, 1),
        "queue_wait_s": summary([(g.admitted_at or 0) - g.job.arrival for g in gangs]),
        "start_wait_s": summary([(g.started_at or 0) - g.job.arrival for g in gangs]),
        "gangs_with_a_pending_pod_after_admission": len(pending),
        "multi_node_gangs_with_a_pending_pod": sum(1 for g in pending if g.job.pods > 1),
        "pending_after_admission_s": summary(
            [(g.started_at or 0) - (g.admitted_at or 0) for g in pending]
        ),
        "placements_on_a_full_node": len(sim.overcommits),
        "decide": {
            "passes": len(sim.pass_seconds),
            "p50_ms": round(1000 * statistics.median(sim.pass_seconds), 2),
            "p90_ms": round(1000 * p90(sim.pass_seconds), 2),
            "max_ms": round(1000 * max(sim.pass_seconds), 2),
            "waiting_jobs_per_pass": {
                "mean": round(statistics.fmean(sim.pass_waiting), 1),
                "max": max(sim.pass_waiting),
            },
        },
        "simulation_wall_s": round(wall, 1),
    }


def trace_facts(trace: Sequence[TraceJob]) -> dict[str, Any]:
    sizes: dict[str, int] = {}
    for job in trace:
        key = f"{job.pods}x{job.gpus}"
        sizes[key] = sizes.get(key, 0) + 1
    return {
        "jobs_by_shape_pods_x_gpus": dict(sorted(sizes.items(), key=lambda kv: kv[0])),
        "gpu_hours": round(sum(j.pods * j.gpus * j.runtime for j in trace) / 3600, 1),
        "last_arrival_hours": round(trace[-1].arrival / 3600, 2),
    }


def git_commit() -> str:
    out = subprocess.run(["git", "-C", str(TOP), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return out.stdout.strip()


def table(policies: dict[str, dict[str, Any]]) -> Iterable[str]:
    yield (f"{'policy':<13} {'in 1 rack':>13} {'if room':>8} {'util':>6} {'wait mean/p90 s':>17} "
           f"{'pending gangs':>13} {'decide p50/p90 ms':>18}")  # fmt: skip
    for name, f in policies.items():
        rack = f"{f['multi_node_gangs_in_one_rack']}/{f['multi_node_gangs_that_fit_one_rack']}"
        room = f"{f['share_in_one_rack_of_those']:.0%}"
        wait = f"{f['queue_wait_s']['mean']:.0f}/{f['queue_wait_s']['p90']:.0f}"
        ms = f"{f['decide']['p50_ms']:.1f}/{f['decide']['p90_ms']:.1f}"
        pending = f["gangs_with_a_pending_pod_after_admission"]
        util = f"{f['utilisation']:.1%}"
        yield (f"{name:<13} {rack:>7} {f['share_in_one_rack']:>5.0%} {room:>8} {util:>6} "
               f"{wait:>17} {pending:>13} {ms:>18}")  # fmt: skip


def machine() -> dict[str, Any]:
    """What the figures were measured on (bench/elastic.py's too)."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "processor": platform.machine(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


def trace_parameters(seed: int, jobs: int) -> dict[str, Any]:
    """The cluster and trace a result was measured on (bench/elastic.py's too)."""
    return {
        "seed": seed,
        "jobs": jobs,
        "nodes": NODES,
        "gpus_per_node": GPUS_PER_NODE,
        "racks": RACKS,
        "blocks": BLOCKS,
        "namespaces": NAMESPACES,
        "shapes_pods_gpus_share": [list(m) for m in MIX],
        "runtime_s_log_uniform": list(RUNTIME_S),
        "offered_load": OFFERED_LOAD,
        "arrivals_per_hour": round(3600 * arrival_rate(), 2),
        "topology_levels": list(LEVELS),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    started = time.perf_counter()
    trace = make_trace(args.jobs, args.seed)
    policies: dict[str, dict[str, Any]] = {}
    for name, levels, request in POLICIES:
        sim = Sim(name, levels, request)
        t0 = time.perf_counter()
        sim.run(trace)
        policies[name] = figures(sim, time.perf_counter() - t0)
    result = {
        "command": " ".join(["python bench/placement.py", shlex.join(sys.argv[1:])]).strip(),
        "operator_commit": git_commit(),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": trace_parameters(args.seed, args.jobs),
        "trace": trace_facts(trace),
        "policies": policies,
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(table(policies)))
    print(f"wall {result['wall_s']} s; {RESULTS.relative_to(TOP)}")


if __name__ == "__main__":
    main()
