"""Per-rank heartbeats (dtjob_trainer/heartbeat.py): the summary rank 0 reports, the
straggler rule, the one-line "where it waits", and the thread's publishing and stall dump
against an in-memory store. No processes: the launches are in test_heartbeat_launch.py."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from traceback import FrameSummary
from typing import Any

import pytest

from dtjob_trainer import report as helper
from dtjob_trainer.fault import FaultPlan, read_fault_plan, step_fault
from dtjob_trainer.heartbeat import (
    CHECKPOINTING,
    KEY_PREFIX,
    STALL_LINE_PATTERN,
    TRAINING,
    Beat,
    Heartbeat,
    HeartbeatThread,
    StragglerTracker,
    slowdowns,
    stall_line,
    summarize_ranks,
    waiting_in,
)
from dtjob_trainer.progress import ProgressReporter
from dtjob_trainer.report import Reporter
from helpers.clock import FakeClock

NOW = 1_800_000_000.0


def a_beat(rank: int, step: int = 100, ago: float = 0.5, **fields: Any) -> Beat:
    """A beat whose last step was `ago` seconds before NOW, 0.1 s steps unless overridden."""
    return Beat(**{"rank": rank, "step": step, "time": NOW - ago, "stepSeconds": 0.1, **fields})


@pytest.mark.parametrize(
    ("busy", "expected"),
    [
        ({}, {}),
        ({0: 0.1}, {}),  # one rank is nobody's straggler
        ({0: 0.1, 1: 0.1}, {}),
        ({0: 0.01, 1: 0.1}, {1: 10.0}),  # of two, the slow one: against the other's time
        ({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.16}, {3: 1.6}),
        ({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.15}, {}),  # 1.5 x is not above 1.5 x
        ({0: 0.1, 1: 0.3, 2: 0.1, 3: 0.3}, {1: 3.0, 3: 3.0}),  # two slow ones
        ({0: 0.0, 1: 0.0}, {}),  # no time measured: no ratio
    ],
)
def test_slowdowns_compare_each_rank_with_the_median_of_the_others(
    busy: dict[int, float], expected: dict[int, float]
) -> None:
    assert slowdowns(busy) == pytest.approx(expected)


def test_a_straggler_is_slow_for_a_window_of_heartbeats_in_a_row() -> None:
    tracker = StragglerTracker(window=3)
    rounds = [{1: 2.0}, {1: 2.0, 2: 3.0}, {1: 2.5, 2: 3.0}, {2: 3.0}, {1: 2.0}]
    assert [tracker.update(r) for r in rounds] == [{}, {}, {1: 2.5}, {2: 3.0}, {}]


@pytest.mark.parametrize(
    ("beats", "stragglers", "expected"),
    [
        pytest.param([], {}, {"count": 4, "reporting": 0}, id="nobody-reports-yet"),
        pytest.param(
            [a_beat(0, 100), a_beat(1, 98, ago=9.0), a_beat(2, 99), a_beat(3, 100)],
            {},
            {"minStep": 98, "maxStep": 100, "stopped": 0, "behind": []},
            # 9 s-old beats are normal: a rank publishes every 10 s
            id="healthy-gang-with-stale-beats",
        ),
        pytest.param(
            [a_beat(0, 100), a_beat(1, 40, ago=300.0), a_beat(2, 100), a_beat(3, 100)],
            {},
            {"stopped": 1, "behind": [{"rank": 1, "step": 40, "lastStepAgo": 300.0}]},
            id="one-rank-stopped-others-go-on",
        ),
        pytest.param(
            [
                a_beat(0, 50, ago=61.0, collectives=151),
                a_beat(1, 50, ago=60.9, collectives=150, waitingIn="hang (x.py:1)"),
                a_beat(2, 50, ago=61.0, collectives=151),
                a_beat(3, 50, ago=61.2, collectives=151),
            ],
            {},
            {
                "stopped": 4,
                "behind": [
                    {"rank": 1, "step": 50, "lastStepAgo": 60.9, "waitingIn": "hang (x.py:1)"},
                    {"rank": 3, "step": 50, "lastStepAgo": 61.2},
                    {"rank": 0, "step": 50, "lastStepAgo": 61.0},
                ],
            },
            # everyone waits in the collective rank 1 never entered: rank 1 first
            id="whole-gang-hung-in-a-collective",
        ),
        pytest.param(
            [a_beat(0, 50, ago=60.0), a_beat(1, 49, ago=70.0), a_beat(2, 50, ago=75.0)],
            {},
            {
                "stopped": 3,
                "behind": [
                    {"rank": 1, "step": 49, "lastStepAgo": 70.0},
                    {"rank": 2, "step": 50, "lastStepAgo": 75.0},
                    {"rank": 0, "step": 50, "lastStepAgo": 60.0},
                ],
            },
            id="fewest-steps-first-then-the-oldest-step",
        ),
        pytest.param(
            [a_beat(0, 50), a_beat(1, 50, ago=900.0, activity=CHECKPOINTING)],
            {},
            {"stopped": 0, "behind": []},
            id="a-long-checkpoint-is-not-a-stop",
        ),
        pytest.param(
            [a_beat(0, 5, ago=25.0, stepSeconds=3.0), a_beat(1, 5, ago=35.0, stepSeconds=3.0)],
            {},
            {"stopped": 1, "stepSeconds": 3.0},
            id="slow-steps-allow-ten-steps-of-silence",
        ),
        pytest.param(
            [a_beat(r) for r in range(6)],
            {5: 1.234, 2: 4.0, 4: 2.0, 1: 1.6},
            {"stragglers": [{"rank": r, "slowdown": s} for r, s in ((2, 4.0), (4, 2.0), (1, 1.6))]},
            id="slowest-stragglers-first-at-most-three",
        ),
    ],
)
def test_summary_of_the_ranks(
    beats: list[Beat], stragglers: dict[int, float], expected: dict[str, Any]
) -> None:
    summary = summarize_ranks(beats, 4, NOW, stragglers, heartbeat_seconds=10.0)
    for key, value in expected.items():
        assert summary[key] == value, key
    if not beats:
        assert summary == expected


def test_the_summary_of_a_thousand_ranks_stays_small() -> None:
    beats = [a_beat(r, 10, ago=500.0 + r, waitingIn="x" * 200, collectives=r) for r in range(1000)]
    summary = summarize_ranks(beats, 1000, NOW, dict.fromkeys(range(1000), 2.0))
    assert len(json.dumps(summary)) < 1500
    assert [b["rank"] for b in summary["behind"]] == [0, 1, 2]


def frame(path: str, name: str, line: int = 10) -> FrameSummary:
    return FrameSummary(path, line, name)


SITE = "/usr/lib/python3.11/site-packages"
TRAINER = f"{SITE}/dtjob_trainer"


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        pytest.param([], None, id="no-stack"),
        pytest.param(
            [
                frame(f"{TRAINER}/runner.py", "_train", 200),
                frame(f"{TRAINER}/loop.py", "run_loop", 180),
                frame(f"{TRAINER}/strategies/ddp.py", "step", 88),
                frame(f"{SITE}/torch/distributed/c10d_logger.py", "wrapper", 81),
                frame(f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce", 2950),
            ],
            "all_reduce (torch/distributed/distributed_c10d.py:2950) "
            "<- step (dtjob_trainer/strategies/ddp.py:88)",
            id="innermost-collective-and-its-trainer-caller",
        ),
        pytest.param(
            [
                frame(f"{TRAINER}/loop.py", "run_loop", 180),
                frame(f"{TRAINER}/strategies/data_parallel.py", "step", 30),
                frame(f"{SITE}/torch/_tensor.py", "backward", 625),
                frame(f"{SITE}/torch/autograd/graph.py", "_engine_run_backward", 829),
            ],
            "_engine_run_backward (torch/autograd/graph.py:829) "
            "<- step (dtjob_trainer/strategies/data_parallel.py:30)",
            id="no-collective-in-python-the-innermost-frame",
        ),
        pytest.param(
            [
                frame(f"{TRAINER}/loop.py", "run_loop", 180),
                frame(f"{TRAINER}/fault.py", "fault", 61),
            ],
            "fault (dtjob_trainer/fault.py:61) <- run_loop (dtjob_trainer/loop.py:180)",
            id="stuck-in-trainer-code",
        ),
        pytest.param(
            [
                frame("/app/train.py", "main", 150),
                frame(f"{SITE}/torch/utils/data/dataloader.py", "_get_data", 1300),
                frame("/usr/lib/python3.11/queue.py", "get", 180),
                frame("/usr/lib/python3.11/threading.py", "wait", 331),
            ],
            "_get_data (torch/utils/data/dataloader.py:1300)",
            id="queue-and-threading-internals-skipped",
        ),
    ],
)
def test_where_a_thread_waits_in_one_line(frames: list[FrameSummary], expected: str) -> None:
    assert waiting_in(frames) == expected


def test_the_stall_line_is_found_by_its_pattern() -> None:
    text = "other output\n" + stall_line(3, 1200, 600.7) + "\nThread 0x1 (most recent call first):"
    found = STALL_LINE_PATTERN.search(text)
    assert found is not None
    assert found.group("rank", "step", "seconds") == ("3", "1200", "600")
    assert found.group(0) == "dtjob: rank 3 stalled at step 1200 for 600s; stacks follow"


def test_a_beat_survives_the_store_and_garbage_does_not() -> None:
    beat = a_beat(2, waitingIn="x", collectives=7)
    assert Beat.from_json(beat.to_json()) == beat
    assert "busySeconds" not in beat.to_json()  # unset fields are left out
    assert [Beat.from_json(t) for t in (b"{", b"[1]", b'{"rank": 1}')] == [None, None, None]


def test_heartbeat_measures_steps_and_leaves_pauses_out() -> None:
    activities: list[str] = []
    clock = FakeClock()
    hb = Heartbeat(rank=1, on_activity=activities.append, monotonic=clock)
    assert hb.snapshot(None, None) is None  # no step yet: nothing to publish
    hb.beat(0)
    for step in (1, 2):
        clock.now += 0.01
        hb.beat(step)
    with hb.doing(CHECKPOINTING):
        assert hb.idle_seconds() == 0.0
        clock.now += 0.05
    clock.now += 0.02
    assert hb.idle_seconds() == pytest.approx(0.02)  # training again: idle since the pause
    hb.beat(3)  # the first step after a pause has no duration: the pause is not a step
    beat = hb.snapshot("w", 5)
    assert beat is not None and (beat.step, beat.activity, beat.collectives) == (3, TRAINING, 5)
    assert list(hb.wall) == pytest.approx([0.01, 0.01])
    assert beat.stepSeconds == pytest.approx(0.01)
    assert activities == [CHECKPOINTING, TRAINING]  # what rank 0 reports as progress.activity


class MemoryStore:
    """The store calls the thread makes, on a dict."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)


def test_rank_zero_publishes_and_summarises_every_rank() -> None:
    store = MemoryStore()
    store.set(f"{KEY_PREFIX}1", a_beat(1, 7, ago=0.0, time=time.time()).to_json())
    summaries: list[dict[str, Any]] = []
    hb = Heartbeat(rank=0)
    hb.beat(7)
    thread = HeartbeatThread(hb, 3, 10.0, lambda: store, summaries.append, collectives=lambda: 9)
    thread.tick()
    assert json.loads(store.data[f"{KEY_PREFIX}0"])["collectives"] == 9
    (summary,) = summaries
    assert (summary["count"], summary["reporting"], summary["maxStep"]) == (3, 2, 7)
    assert thread.failures == 0


def test_a_still_rank_dumps_its_stacks_once_per_episode(tmp_path: Path) -> None:
    store = MemoryStore()
    hb = Heartbeat(rank=3)
    hb.beat(12)
    with (tmp_path / "stderr").open("w+") as out:
        thread = HeartbeatThread(
            hb, 4, 0.01, lambda: store, stall_dump_seconds=0.05, collectives=lambda: None, out=out
        )

        def ticks() -> None:  # in a thread of their own, as in the trainer
            thread.tick()  # not still long enough yet
            time.sleep(0.06)
            thread.tick()
            thread.tick()  # same episode: no second dump
            hb.beat(13)
            time.sleep(0.06)
            thread.tick()  # a new episode

        ticker = threading.Thread(target=ticks)
        ticker.start()
        ticker.join()  # the main thread waits here: its waitingIn names this test
        out.seek(0)
        text = out.read()
    found = STALL_LINE_PATTERN.findall(text)
    assert [(rank, step) for rank, step, _ in found] == [("3", "12"), ("3", "13")]
    assert "most recent call first" in text and "test_heartbeat.py" in text
    beat = Beat.from_json(store.data[f"{KEY_PREFIX}3"])
    assert beat is not None and beat.waitingIn and "test_heartbeat.py" in beat.waitingIn


def test_a_failing_store_never_reaches_training() -> None:
    def broken() -> MemoryStore:
        raise RuntimeError("connection refused")

    hb = Heartbeat(rank=1)
    hb.beat(1)
    thread = HeartbeatThread(hb, 2, 10.0, broken, collectives=lambda: None)
    thread.tick()
    thread.tick()
    assert thread.failures == 2


def test_the_thread_stops_when_asked() -> None:
    hb = Heartbeat(rank=0)
    hb.thread = HeartbeatThread(hb, 1, 0.01, lambda: None, collectives=lambda: None)
    hb.thread.start()
    hb.stop()
    hb.thread.join(timeout=5)
    assert not hb.thread.is_alive()


@pytest.mark.parametrize(
    ("environ", "plan"),
    [
        ({}, None),
        ({"DTJ_FAULT_HANG_AT_STEP": "4", "DTJ_FAULT_HANG_RANK": "1"}, FaultPlan(4, 1)),
        (
            {"DTJ_FAULT_SLOW_RANK": "2", "DTJ_FAULT_SLOW_SECONDS": "0.5"},
            FaultPlan(slow_rank=2, slow_seconds=0.5),
        ),
        # The first gang only, by default: the restarted gang (generation 1) is cured.
        ({"DTJ_FAULT_HANG_AT_STEP": "4", "DTJ_GANG_GENERATION": "1"}, None),
        (
            {"DTJ_FAULT_HANG_AT_STEP": "4", "DTJ_GANG_GENERATION": "2", "DTJ_FAULT_GANG": "2"},
            FaultPlan(4, 0),
        ),
    ],
)
def test_fault_plans_from_the_environment(environ: dict[str, str], plan: FaultPlan | None) -> None:
    assert read_fault_plan(environ) == plan


def test_only_the_named_rank_gets_the_fault() -> None:
    plan = FaultPlan(hang_at_step=3, hang_rank=1, slow_rank=0, slow_seconds=0.02)
    assert step_fault(plan, 2) is None and step_fault(None, 0) is None
    slow = step_fault(plan, 0)
    assert slow is not None
    started = time.perf_counter()
    slow(3)  # rank 0 does not hang at rank 1's step, it computes 20 ms longer
    assert time.perf_counter() - started >= 0.02
    hang = step_fault(plan, 1)
    assert hang is not None
    hang(2)  # not its step
    worker = threading.Thread(target=hang, args=(3,), daemon=True)
    worker.start()
    worker.join(timeout=0.2)
    assert worker.is_alive()  # blocked for good (a daemon: it dies with the test process)


def test_the_progress_helper_gives_custom_code_the_same_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No process group in this process: rank 0 reports its own timing only.
    reporter = Reporter(None)
    monkeypatch.setattr(helper, "_default", reporter)
    monkeypatch.setattr(helper, "_default_heartbeat", None)
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "DTJ_HEARTBEAT_SECONDS": "0.05"}.items():
        monkeypatch.setenv(name, value)
    helper.heartbeat(1)
    helper.heartbeat(2)
    try:
        wait_until(lambda: "ranks" in reporter.fields)
        ranks = reporter.fields["ranks"]
        assert (ranks["count"], ranks["reporting"], ranks["maxStep"]) == (2, 1, 2)
        helper.report(activity=CHECKPOINTING)
        assert reporter.fields["activity"] == helper._default_heartbeat.activity == CHECKPOINTING
    finally:
        helper._default_heartbeat.stop()


def wait_until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_rank_zero_activity_rides_on_the_next_progress_write() -> None:
    written: list[dict[str, Any]] = []

    class ListSink:
        def write(self, body: str) -> None:
            written.append(json.loads(body))

    reporter = ProgressReporter(ListSink(), min_interval=0.0)
    reporter.remember(activity=CHECKPOINTING)  # what Heartbeat.on_activity does on rank 0
    assert written == []
    reporter.update(ranks={"count": 2})
    assert (written[0]["activity"], written[0]["ranks"]) == (CHECKPOINTING, {"count": 2})


def test_the_thread_wakes_when_the_stall_dump_falls_due_not_a_period_later() -> None:
    hb = Heartbeat(rank=1)
    hb.beat(5)
    thread = HeartbeatThread(hb, 2, 10.0, lambda: None, stall_dump_seconds=22.0)
    assert thread.next_wait() == 10.0  # the dump is 22 s away: a whole period
    hb.last_mono -= 15.0  # still for 15 s: due in 7
    assert 6.9 < thread.next_wait() < 7.2
    hb.last_mono -= 10.0  # overdue: at once, but never a busy loop
    assert thread.next_wait() == 0.2
    thread._dumped_for = hb.last_mono  # this episode dumped already: back to the period
    assert thread.next_wait() == 10.0
    assert HeartbeatThread(hb, 2, 10.0, lambda: None).next_wait() == 10.0  # no dump asked
