"""The simulation of bench/elastic.py: a trace replayed over simulated time, each admission
pass the operator's own decide() over the jobs and fake nodes of the moment; fixed-size or
elastic gangs (Life), their resizes, restarts and preemptions (Sim). The figures and the
command line are in elastic.py."""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from placement import (
    EPOCH,
    GPUS_PER_NODE,
    LEVELS,
    NODES,
    TraceJob,
    admitted_in_order,
    cluster,
    waiting_view,
)

from dtjob_operator.admission.decide import Decisions, decide
from dtjob_operator.admission.fit import Node
from dtjob_operator.admission.resources import GPU
from dtjob_operator.admission.snapshot import JobView, Snapshot

COOLDOWN_S, MAX_RESIZES = 600.0, 10  # runPolicy.elastic's defaults
RESTART_S, DRAIN_S = 120.0, 30.0
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
                elif life is not None:
                    self.on_event(kind, life, token, now)
            if timer or any(self.needs_pass(life) for life in self.live.values()):
                self.admission_pass(now)
            else:
                self.growable_since = {}  # what a pass would keep: nothing is growable

    def on_event(self, kind: str, life: Life, token: int, now: float) -> None:
        """An event of a subclass's own (bench/sick_nodes.py: a gang's fault)."""

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
