"""Per-rank heartbeats: which rank stopped first, which ranks are slow, where a stuck rank
waits (docs/env-contract.md, "Progress").

Every rank records its step in memory (`Heartbeat.beat(step)`: a few assignments, no I/O).
A daemon thread per rank (`HeartbeatThread`) publishes a `Beat` every `period` seconds
(DTJ_HEARTBEAT_SECONDS, default 10) under `dtj/heartbeat/<rank>` in the rendezvous store,
over a client connection of its own; rank 0's thread reads every rank's beat and hands a
small summary (`summarize_ranks`) to the progress report as `ranks`. Collectives release
the GIL, so rank 0's thread keeps refreshing that summary while its main thread hangs in
one: the operator names the rank that stopped first from it. The same thread is the rank's
own watchdog: once its step has stood still for DTJ_STALL_DUMP_SECONDS (unset: never) it
prints one `STALL_LINE` and every thread's stack to stderr, once per episode.

Standard library only (torch is imported where the store is looked up), so that a custom
image can carry it next to report.py: copy it as `dtjob_heartbeat.py`.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import re
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TextIO

TRAINING, CHECKPOINTING, EVALUATING = "training", "checkpointing", "evaluating"
DEFAULT_HEARTBEAT_SECONDS = 10.0
KEY_PREFIX = "dtj/heartbeat/"
RECENT_STEPS = 32  # step durations behind a beat's medians
STRAGGLER_FACTOR = 1.5
STRAGGLER_WINDOW = 3  # heartbeats in a row
LISTED = 3  # ranks named in `behind` and `stragglers`: the summary stays small at any scale
WAITING_IN_CHARS = 200
STALL_LINE = "dtjob: rank {rank} stalled at step {step} for {seconds}s; stacks follow"
STALL_LINE_PATTERN = re.compile(
    r"^dtjob: rank (?P<rank>\d+) stalled at step (?P<step>-?\d+) for (?P<seconds>\d+)s; "
    r"stacks follow$",
    re.MULTILINE,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Beat:
    """One rank's heartbeat, as published in the store (JSON, these names)."""

    rank: int
    step: int
    """Steps this rank has completed."""
    time: float
    """Unix time of its last step, or of the end of its last checkpoint or evaluation."""
    stepSeconds: float | None = None
    """Median wall time of its recent steps."""
    busySeconds: float | None = None
    """Median CPU time of its recent steps (waiting in a collective costs none)."""
    activity: str = TRAINING
    collectives: int | None = None
    """Collectives this rank has entered on the default process group."""
    waitingIn: str | None = None
    """Where its main thread waits (`waiting_in`), once it has stood still a while."""
    at: float = 0.0
    """Unix time of publication."""

    def to_json(self) -> str:
        """Compact JSON without unset fields."""
        fields = {k: v for k, v in asdict(self).items() if v is not None}
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Beat | None:
        """The beat in `text`; None for anything else (a rank of another version, say)."""
        try:
            data = json.loads(text)
            return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        except (ValueError, TypeError, AttributeError):
            return None


# --- pure: summary, stragglers, where a thread waits ---------------------------------------


def median(values: Sequence[float]) -> float | None:
    """The median, None of nothing."""
    return statistics.median(values) if values else None


def slowdowns(busy: Mapping[int, float], factor: float = STRAGGLER_FACTOR) -> dict[int, float]:
    """Ranks whose busy time per step is above `factor` x the median of the OTHER ranks',
    with that ratio. The others', not all ranks': with two ranks, a slow one would raise
    the median it is compared with. Busy (CPU) time, not wall time: in lock-step training
    every rank's wall step takes as long as the slowest rank's, the others wait in the
    collective."""
    if len(busy) < 2:
        return {}
    ordered = sorted(busy.items(), key=lambda item: item[1])
    values = [v for _, v in ordered]
    n = len(values) - 1  # the others' count

    def others_at(j: int, i: int) -> float:  # j-th smallest of the values without index i
        return values[j] if j < i else values[j + 1]

    out = {}
    for i, (rank, value) in enumerate(ordered):
        mid = n // 2
        others = others_at(mid, i) if n % 2 else (others_at(mid - 1, i) + others_at(mid, i)) / 2
        if others > 0 and value > factor * others:
            out[rank] = value / others
    return out


class StragglerTracker:
    """Ranks slow in `window` consecutive heartbeats (one slow step time is not a straggler:
    a checkpoint, a page fault, a neighbour's burst)."""

    def __init__(self, window: int = STRAGGLER_WINDOW) -> None:
        self.window = window
        self.streaks: dict[int, int] = {}

    def update(self, slow: Mapping[int, float]) -> dict[int, float]:
        """Count this heartbeat's slow ranks; return those slow for `window` in a row."""
        self.streaks = {rank: self.streaks.get(rank, 0) + 1 for rank in slow}
        return {rank: slow[rank] for rank, n in self.streaks.items() if n >= self.window}


def idle_after(heartbeat_seconds: float, step_seconds: float | None) -> float:
    """How long a rank may go without a step before it counts as stopped: two heartbeats
    (a beat can be that old) or ten steps, whichever is longer."""
    return max(2 * heartbeat_seconds, 10 * (step_seconds or 0.0))


def _culprit_first(beat: Beat) -> tuple[int, float, float, int]:
    # The fewest steps, then the fewest collectives entered (the others wait in the one it
    # never joined), then the oldest last step.
    collectives = float("inf") if beat.collectives is None else beat.collectives
    return (beat.step, collectives, beat.time, beat.rank)


def summarize_ranks(
    beats: Sequence[Beat],
    world_size: int,
    now: float,
    stragglers: Mapping[int, float],
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS,
) -> dict[str, Any]:
    """progress.json's `ranks`: how many ranks report, their step range and median step
    time, how many have stopped (no step for `idle_after` while training), the first
    `LISTED` of those, the one that most likely stopped first leading (`behind`), and the
    `LISTED` slowest persistent `stragglers`. Small whatever the world size."""
    summary: dict[str, Any] = {"count": world_size, "reporting": len(beats)}
    if not beats:
        return summary
    step_seconds = median([b.stepSeconds for b in beats if b.stepSeconds is not None])
    limit = idle_after(heartbeat_seconds, step_seconds)
    stopped = [b for b in beats if b.activity == TRAINING and now - b.time > limit]
    behind = []
    for b in sorted(stopped, key=_culprit_first)[:LISTED]:
        entry: dict[str, Any] = {
            "rank": b.rank,
            "step": b.step,
            "lastStepAgo": round(max(0.0, now - b.time), 1),
        }
        if b.waitingIn:
            entry["waitingIn"] = b.waitingIn
        behind.append(entry)
    slowest = sorted(stragglers.items(), key=lambda item: (-item[1], item[0]))[:LISTED]
    summary.update(
        minStep=min(b.step for b in beats),
        maxStep=max(b.step for b in beats),
        stopped=len(stopped),
        behind=behind,
        stragglers=[{"rank": r, "slowdown": round(s, 2)} for r, s in slowest],
    )
    if step_seconds is not None:
        summary["stepSeconds"] = round(step_seconds, 4)
    return summary


# Frames that say nothing about where training waits: the machinery of waiting itself.
_PLUMBING = ("/threading.py", "/queue.py", "/selectors.py", "/concurrent/futures/")


def short_path(filename: str) -> str:
    """A frame's file from its package down (`torch/...`, `dtjob_trainer/...`)."""
    path = filename.replace("\\", "/")
    for package in ("dtjob_trainer/", "torch/"):
        if (at := path.rfind("/" + package)) >= 0:
            return path[at + 1 :]
    return path.rsplit("/", 1)[-1]


def _where(frame: traceback.FrameSummary) -> str:
    return f"{frame.name} ({short_path(frame.filename)}:{frame.lineno})"


def waiting_in(frames: Sequence[traceback.FrameSummary]) -> str | None:
    """One line for where a thread waits, from its stack (outermost first, as
    traceback.extract_stack gives it): the innermost torch.distributed call, or else the
    innermost frame, then the innermost trainer frame outside it, e.g. "all_reduce
    (torch/distributed/distributed_c10d.py:2950) <- step (dtjob_trainer/strategies/
    data_parallel.py:88)". Threading and queue internals are skipped."""
    useful = [f for f in frames if not any(p in f.filename for p in _PLUMBING)]
    if not useful:
        return None
    index = next(
        (i for i in reversed(range(len(useful))) if "torch/distributed/" in useful[i].filename),
        len(useful) - 1,
    )
    caller = next(
        (f for f in reversed(useful[:index]) if "dtjob_trainer/" in f.filename),
        None,
    )
    line = _where(useful[index]) + (f" <- {_where(caller)}" if caller else "")
    return line[:WAITING_IN_CHARS]


def stall_line(rank: int, step: int, seconds: float) -> str:
    """The line before a stalled rank's stacks (`STALL_LINE_PATTERN` finds it in a log)."""
    return STALL_LINE.format(rank=rank, step=step, seconds=int(seconds))


# --- side effects: the step clock, the store, the thread -----------------------------------


class Heartbeat:
    """This rank's step clock. `beat()` is on the step path: two clock reads and a few
    assignments; the thread reads the fields (whole-object reads, safe under the GIL)."""

    def __init__(
        self,
        rank: int,
        recent: int = RECENT_STEPS,
        on_activity: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rank = rank
        self._monotonic = monotonic  # a test's own clock: step times without real sleeps
        self.on_activity = on_activity  # rank 0: into the progress report
        self.step: int | None = None
        self.activity = TRAINING
        self.last_time = time.time()  # unix: last step, or end of another activity
        self.last_mono = monotonic()  # the same instant, for idle spans
        self.wall: deque[float] = deque(maxlen=recent)
        self.busy: deque[float] = deque(maxlen=recent)
        self._mark: tuple[float, float] | None = None
        self.thread: HeartbeatThread | None = None

    def beat(self, step: int) -> None:
        """Record that `step` steps are complete."""
        mono, cpu = self._monotonic(), time.process_time()
        if self._mark is not None:
            self.wall.append(mono - self._mark[0])
            self.busy.append(cpu - self._mark[1])
        self._mark = (mono, cpu)
        self.step, self.last_time, self.last_mono = step, time.time(), mono

    def set_activity(self, activity: str) -> None:
        """Training, checkpointing or evaluating: only training time counts as idle, and
        the pause is left out of the next step's duration."""
        self.activity = activity
        self._mark = None
        self.last_time, self.last_mono = time.time(), self._monotonic()
        if self.on_activity is not None:
            self.on_activity(activity)

    @contextmanager
    def doing(self, activity: str) -> Iterator[None]:
        """`activity` for the duration of the block, then training again."""
        self.set_activity(activity)
        try:
            yield
        finally:
            self.set_activity(TRAINING)

    def idle_seconds(self) -> float:
        """Seconds without a step while training (0 while checkpointing or evaluating)."""
        return 0.0 if self.activity != TRAINING else self._monotonic() - self.last_mono

    def snapshot(self, waiting: str | None, collectives: int | None) -> Beat | None:
        """The beat to publish; None before the first step (ranks that run no steps, such
        as parameter servers, never publish)."""
        if self.step is None:
            return None
        return Beat(
            rank=self.rank,
            step=self.step,
            time=round(self.last_time, 3),
            stepSeconds=_rounded(median(list(self.wall))),
            busySeconds=_rounded(median(list(self.busy))),
            activity=self.activity,
            collectives=collectives,
            waitingIn=waiting,
            at=round(time.time(), 3),
        )

    def stop(self) -> None:
        """Stop publishing (end of training); the last beat stays in the store."""
        if self.thread is not None:
            self.thread.halt.set()


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


class Store(Protocol):
    """The part of torch.distributed.Store the thread uses."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...


def torch_store(timeout: float) -> Store | None:
    """A store client for the thread: a connection of its own to the TCPStore behind
    torch.distributed's default store (the main thread may be blocked in a call on the
    shared one), or that store itself when it is not a TCPStore. None when torch is not
    importable or no process group is initialised."""
    try:
        from datetime import timedelta

        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    store: Any = c10d._get_default_store()
    base = store
    while isinstance(base, c10d.PrefixStore):
        base = base.underlying_store
    tcp_store: Any = dist.TCPStore  # type: ignore[attr-defined]  # not in torch's stubs
    if isinstance(base, tcp_store):
        return tcp_store(  # type: ignore[no-any-return]
            base.host,
            base.port,
            is_master=False,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout),
        )
    return store  # type: ignore[no-any-return]


def default_group_collectives() -> int | None:
    """Collectives this process has entered on the default process group (c10d's sequence
    number; gloo and NCCL keep one), None where unknown."""
    try:
        from torch.distributed import distributed_c10d as c10d

        group: Any = c10d._get_default_group()
        return int(group._get_sequence_number_for_group())
    except Exception:
        return None


def main_thread_stack() -> list[traceback.FrameSummary]:
    """The main thread's stack now (outermost first)."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    return list(traceback.extract_stack(frame)) if frame is not None else []


class HeartbeatThread(threading.Thread):
    """Publishes the rank's beat every `period` s; on rank 0 (`on_summary` given) also reads
    every rank's and reports the summary; dumps the stacks once per stall episode."""

    def __init__(
        self,
        heartbeat: Heartbeat,
        world_size: int,
        period: float,
        connect: Callable[[], Store | None],
        on_summary: Callable[[dict[str, Any]], None] | None = None,
        stall_dump_seconds: float | None = None,
        collectives: Callable[[], int | None] = default_group_collectives,
        out: TextIO | None = None,
    ) -> None:
        super().__init__(name="dtjob-heartbeat", daemon=True)
        self.heartbeat, self.world_size, self.period = heartbeat, world_size, period
        self.connect, self.on_summary = connect, on_summary
        self.stall_dump_seconds = stall_dump_seconds
        self.collectives, self.out = collectives, out
        self.halt = threading.Event()
        self.tracker = StragglerTracker()
        self.store: Store | None = None
        self.failures = 0
        self._known: list[str] = []  # keys seen once (a key never goes away)
        self._dumped_for: float | None = None  # the idle span already dumped

    def run(self) -> None:
        while not self.halt.wait(self.next_wait()):
            self.tick()

    def next_wait(self) -> float:
        """Seconds to the next tick: the period, or less when the stall dump falls due
        before it, so that the stacks are printed on time (the operator reads them when it
        declares the stall, a quarter of the deadline later) and not up to a period late."""
        if self.stall_dump_seconds is None or self._dumped_for == self.heartbeat.last_mono:
            return self.period
        due = self.stall_dump_seconds - self.heartbeat.idle_seconds()
        return min(self.period, max(0.2, due + 0.05))

    def tick(self) -> None:
        """One heartbeat; never raises (a failure is logged: the first, then every 10th)."""
        try:
            self._tick()
            self.failures = 0
        except Exception as exc:
            self.store = None  # a broken connection is not reused: connect again next time
            self.failures += 1
            if self.failures == 1 or self.failures % 10 == 0:
                log.warning("heartbeat failed (%d in a row): %s", self.failures, exc)

    def _tick(self) -> None:
        hb = self.heartbeat
        idle = hb.idle_seconds()
        recent = median(list(hb.wall))
        waiting = None
        if idle > idle_after(self.period, recent) or self._stall_due(idle):
            waiting = waiting_in(main_thread_stack())
        if self._stall_due(idle) and self._dumped_for != hb.last_mono:
            self._dumped_for = hb.last_mono
            self.dump_stacks(idle)
        beat = hb.snapshot(waiting, self.collectives())
        if self.store is None and self.world_size > 1:
            self.store = self.connect()
        if beat is not None and self.store is not None:
            self.store.set(f"{KEY_PREFIX}{hb.rank}", beat.to_json())
        if self.on_summary is None:
            return
        beats = self._read_all() if self.store is not None else []
        if not beats and beat is not None:
            beats = [beat]  # one process, or no store yet: rank 0's own
        busy = {b.rank: b.busySeconds for b in beats if b.busySeconds is not None}
        stragglers = self.tracker.update(slowdowns(busy))
        summary = summarize_ranks(beats, self.world_size, time.time(), stragglers, self.period)
        self.on_summary(summary)

    def _stall_due(self, idle: float) -> bool:
        return self.stall_dump_seconds is not None and idle >= self.stall_dump_seconds

    def dump_stacks(self, idle: float) -> None:
        """The stall line and every thread's stack, on stderr (the pod's log)."""
        out = self.out or sys.stderr
        step = self.heartbeat.step
        print(stall_line(self.heartbeat.rank, -1 if step is None else step, idle), file=out)
        out.flush()
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.flush()

    def _read_all(self) -> list[Beat]:
        assert self.store is not None
        known = set(self._known)
        for rank in range(self.world_size):
            key = f"{KEY_PREFIX}{rank}"
            if key not in known and self.store.check([key]):
                self._known.append(key)
        if not self._known:
            return []
        multi_get = getattr(self.store, "multi_get", None)
        values = (
            multi_get(self._known)
            if multi_get is not None
            else [self.store.get(k) for k in self._known]
        )
        return [b for b in map(Beat.from_json, values) if b is not None]


def start_heartbeat(
    rank: int,
    world_size: int,
    period: float = DEFAULT_HEARTBEAT_SECONDS,
    on_summary: Callable[[dict[str, Any]], None] | None = None,
    stall_dump_seconds: float | None = None,
    connect: Callable[[], Store | None] | None = None,
    on_activity: Callable[[str], None] | None = None,
) -> Heartbeat:
    """This rank's heartbeat with its thread started (`on_summary`, `on_activity`: rank 0's
    progress report). The store is looked up by the thread (`torch_store` unless `connect`
    is given), so a slow connection never delays training."""
    heartbeat = Heartbeat(rank, on_activity=on_activity)
    heartbeat.thread = HeartbeatThread(
        heartbeat,
        world_size,
        period,
        connect or (lambda: torch_store(timeout=max(30.0, 3 * period))),
        on_summary,
        stall_dump_seconds,
    )
    heartbeat.thread.start()
    return heartbeat
