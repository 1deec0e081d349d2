"""Liveness fails when a reconcile worker is stuck or kopf's loop is silent, not when idle."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from dtjob_operator.health import Heartbeats, Verdict, serve_liveness
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.reconcile import Reconciler
from dtjob_operator.settings import OperatorSettings
from helpers.clock import FakeClock


def test_idle_workers_are_alive_and_a_long_reconcile_is_not() -> None:
    clock = FakeClock(100.0)
    beats = Heartbeats(clock)
    clock.now += 1000  # idle for ages, loop beating
    beats.loop_beat()
    assert beats.verdict(300, 60).alive
    beats.started("ns/a")
    clock.now += 299
    beats.loop_beat()
    assert beats.verdict(300, 60).alive
    clock.now += 2
    beats.loop_beat()
    verdict = beats.verdict(300, 60)
    assert not verdict.alive and "ns/a" in verdict.reason
    beats.finished()
    assert beats.verdict(300, 60).alive


def test_a_silent_watch_loop_is_not_alive() -> None:
    clock = FakeClock(100.0)
    beats = Heartbeats(clock)
    clock.now += 61
    verdict = beats.verdict(300, 60)
    assert not verdict.alive and "loop" in verdict.reason


class BlockingApi:
    """Our API wrapper whose first read never returns (a half-open connection)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.entered.set()
        self.release.wait(10)
        return None


def test_a_worker_stuck_in_a_reconcile_fails_the_probe() -> None:
    api = BlockingApi()
    settings = OperatorSettings(admission="external", informers=False)
    reconciler = Reconciler(api, settings, OperatorMetrics())  # type: ignore[arg-type]
    reconciler.start(1)
    server = serve_liveness(
        "http://127.0.0.1:0/healthz", lambda: reconciler.heartbeats.verdict(0.2, 60)
    )
    url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
    try:
        assert urllib.request.urlopen(url, timeout=5).status == 200  # idle: alive
        reconciler.queue.add(("ns", "stuck"))
        assert api.entered.wait(5)
        time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, timeout=5)
        assert err.value.code == 503
        assert "ns/stuck" in json.loads(err.value.read())["reason"]
        api.release.set()
        deadline = time.monotonic() + 5
        while not reconciler.heartbeats.verdict(0.2, 60).alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert urllib.request.urlopen(url, timeout=5).status == 200
    finally:
        api.release.set()
        reconciler.stop()
        server.shutdown()


def test_other_paths_are_not_found() -> None:
    server = serve_liveness("http://127.0.0.1:0/healthz", lambda: Verdict(True, "ok"))
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/x", timeout=5)
        assert err.value.code == 404
    finally:
        server.shutdown()


def test_ready_once_workers_run_and_kopfs_loop_beats_until_it_falls_silent() -> None:
    clock = FakeClock(100.0)
    beats = Heartbeats(clock)
    verdict = beats.readiness(60)
    assert not verdict.alive and "workers" in verdict.reason
    beats.workers_started()
    verdict = beats.readiness(60)
    assert not verdict.alive and "watches" in verdict.reason  # kopf still starting
    beats.loop_beat()
    assert beats.readiness(60).alive
    beats.started("ns/slow")  # a long reconcile fails liveness, not readiness
    clock.now += 59
    assert beats.readiness(60).alive
    clock.now += 2
    verdict = beats.readiness(60)
    assert not verdict.alive and "silent" in verdict.reason
    beats.loop_beat()
    assert beats.readiness(60).alive
    beats.workers_stopped()
    assert not beats.readiness(60).alive


def get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_replica_that_does_not_lead_is_ready() -> None:
    """A standby replica answers 200 on /readyz, as the operator's main wires it."""
    settings = OperatorSettings(admission="external", informers=False)
    reconciler = Reconciler(BlockingApi(), settings, OperatorMetrics(), lambda: False)  # type: ignore[arg-type]
    server = serve_liveness(
        "http://127.0.0.1:0/healthz",
        lambda: reconciler.heartbeats.verdict(300, 60),
        ready=lambda: reconciler.heartbeats.readiness(60),
    )
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        not_yet = {"ready": False, "reason": "reconcile workers not running"}
        assert get(f"{base}/readyz") == (503, not_yet)
        reconciler.start(1)
        status, body = get(f"{base}/readyz")
        assert status == 503 and "watches" in body["reason"]
        reconciler.heartbeats.loop_beat()  # kopf's startup handler
        assert get(f"{base}/readyz") == (200, {"ready": True, "reason": "ok"})
        assert get(f"{base}/healthz") == (200, {"alive": True, "reason": "ok"})
    finally:
        reconciler.stop()
        server.shutdown()
    assert not reconciler.heartbeats.readiness(60).alive


def test_without_a_readiness_check_there_is_no_readyz() -> None:
    server = serve_liveness("http://127.0.0.1:0/healthz", lambda: Verdict(True, "ok"))
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/readyz", timeout=5)
        assert err.value.code == 404
    finally:
        server.shutdown()
