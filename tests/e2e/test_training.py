"""Every examples/cpu job, applied with kubectl, trains for real in containers on the real
node and reaches Succeeded: progress shows in `kubectl get dtj` while it runs, the pods
rendezvous through their DNS names, and the held-out accuracy on digits is above 0.8.

All the examples are applied at once, each in a namespace of its own, the way several teams
share a cluster: the operator's admission starts each gang when the real node has the CPU
for all of its pods and queues the rest (the node's 2 CPUs hold about 7 trainer pods).
That keeps the node busy; one example after another left it three quarters idle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helpers.cluster import REPO
from helpers.realnode import E2E, TERMINAL, pushed, registry_digest

EXAMPLES = sorted(p.stem for p in (REPO / "examples" / "cpu").glob("*.yaml"))
# test_elastic.py trains the elastic one alone: it needs a quota that it grows into.
FLEET = [e for e in EXAMPLES if e != "elastic"]
# Digits has 10 classes (chance 0.1). The CPU examples train 300 SGD steps on standardised
# pixels; single-process training of the same MLP reaches 0.93 held-out, and the
# asynchronous strategies (Hogwild, EASGD, async PS) trail it by a few points.
MIN_ACCURACY = 0.8
# EASGD is judged by its center variable, which trails the workers' models by design
# (elastic averaging pulls it toward them a little each round): 0.58 measured here.
MIN_ACCURACY_BY_EXAMPLE = {"easgd": 0.5}
# All of them, from the first apply: about 10 min on the committed figure (25 min CI runs).
# On the 2.5-3.4x slower machine of 2026-11-28 it took 1463 s and more while trainer pods
# ran one OpenMP thread per core of the node; with one per core of the pod (the operator's
# OMP_NUM_THREADS), 611 s there. A bound for a stuck fleet, not a speed target.
TIMEOUT = 2400
POLL = 2.0


@dataclass
class Seen:
    """What the poller saw of one job: the `kubectl get dtj` rows while it ran, its last state."""

    rows: list[tuple[int, str]] = field(default_factory=list)  # (status step, printed row)
    final: tuple[int, str] | None = None  # the same, once the job had finished
    last: dict[str, Any] = field(default_factory=dict)


@dataclass
class Fleet:
    jobs: dict[str, tuple[str, dict[str, Any]]]  # example -> (namespace, applied manifest)
    seen: dict[tuple[str, str], Seen]
    done: threading.Event
    error: list[BaseException]


def _poll(e2e: E2E, fleet: Fleet, stop: threading.Event) -> None:
    """One `kubectl get` of all jobs and one of their printed rows per round, until every
    job is terminal, TIMEOUT has passed, or the fixture stops it: `done` is set by then, so
    no test waits longer than the fleet as a whole."""
    deadline = time.monotonic() + TIMEOUT
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            items = e2e.get("dtj", "-A")["items"]
            printed = e2e.kubectl("get", "dtj", "-A", "--no-headers", check=False)
            rows = {tuple(line.split()[:2]): line for line in printed.splitlines() if line}
            for obj in items:
                key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                if key not in fleet.seen:
                    continue
                seen = fleet.seen[key]
                seen.last = obj
                st = obj.get("status", {})
                step = (st.get("progress") or {}).get("step")
                if step and st.get("phase") == "Running":
                    seen.rows.append((step, rows.get(key, "")))
                elif step and st.get("phase") in TERMINAL and seen.final is None:
                    seen.final = (step, rows.get(key, ""))
            phases = [s.last.get("status", {}).get("phase") for s in fleet.seen.values()]
            if all(p in TERMINAL for p in phases):
                break
            stop.wait(POLL)
    except BaseException as exc:  # reported by every test that waits on the fleet
        fleet.error.append(exc)
    finally:
        fleet.done.set()


def _selected(request: pytest.FixtureRequest) -> list[str]:
    """The examples whose test this session runs. A failed test is run again alone after
    the lanes (hack/test-lanes.sh): that rerun applies its one example, not the whole fleet
    again (every example's pods, about 520 CPU-s of the node's containers and 400 s of a
    loaded CI machine, to judge one job)."""
    wanted = {
        item.callspec.params["example"]
        for item in request.session.items
        if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
    }
    return [e for e in FLEET if e in wanted]


@pytest.fixture(scope="module")
def fleet(e2e: E2E, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    jobs: dict[str, tuple[str, dict[str, Any]]] = {}
    try:
        for example in _selected(request):
            ns = e2e.new_namespace()
            jobs[example] = (ns, e2e.apply_example(example, ns))
        seen = {(ns, job["metadata"]["name"]): Seen() for ns, job in jobs.values()}
        fleet = Fleet(jobs, seen, threading.Event(), [])
        stop = threading.Event()
        poller = threading.Thread(target=_poll, args=(e2e, fleet, stop), daemon=True)
        poller.start()
        yield fleet
        stop.set()
        poller.join(timeout=30)
    finally:
        for ns, _ in jobs.values():
            e2e.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _finished(e2e: E2E, fleet: Fleet, example: str) -> tuple[dict[str, Any], Seen]:
    ns, job = fleet.jobs[example]
    seen = fleet.seen[(ns, job["metadata"]["name"])]
    fleet.done.wait()  # the poller gives up at its deadline
    if fleet.error:
        raise AssertionError(f"polling the jobs failed: {fleet.error[0]!r}")
    phase = seen.last.get("status", {}).get("phase")
    if phase not in TERMINAL:
        pods = e2e.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False)
        raise AssertionError(f"{example} still {phase} after {TIMEOUT} s: {seen.last}\n{pods}")
    return job, seen


@pytest.mark.timeout(TIMEOUT + 120)  # the first test waits for the whole fleet
@pytest.mark.parametrize("example", FLEET)
def test_example_trains_to_succeeded(e2e: E2E, fleet: Fleet, example: str) -> None:
    job, seen = _finished(e2e, fleet, example)
    ns, name = fleet.jobs[example][0], job["metadata"]["name"]
    status = seen.last["status"]
    assert status["phase"] == "Succeeded", status
    pods = e2e.get("pods", "-n", ns, "-l", f"dtjob.io/job-name={name}")["items"]
    assert pods and all(p["spec"]["nodeName"] == "dtjob-real-0" for p in pods)
    # The node pulled the bundled trainer from its registry: the registry's manifest digest.
    reg, tag = pushed()["REGISTRY"], pushed()["TAG"]
    digest = registry_digest(reg, "dtjob-trainer", tag)
    trainers = [c for p in pods for c in p["status"]["containerStatuses"] if c["name"] == "trainer"]
    assert trainers and all(c["imageID"] == f"{reg}/dtjob-trainer@{digest}" for c in trainers)
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    # Rendezvous went through DNS: MASTER_ADDR is rank 0's pod name in the headless Service.
    assert env["MASTER_ADDR"].endswith(f".{name}.{ns}.svc"), env["MASTER_ADDR"]
    if "command" in job["spec"]["trainer"]:  # the custom-command example: no progress
        rank0 = next(p for p in pods if p["metadata"]["name"].endswith("-0"))
        log = e2e.kubectl("logs", "-n", ns, rank0["metadata"]["name"])
        assert "sum of ranks" in log
        return
    progress = status["progress"]
    assert progress["step"] == progress["totalSteps"] == job["spec"]["trainer"]["steps"]
    assert progress["accuracy"] > MIN_ACCURACY_BY_EXAMPLE.get(example, MIN_ACCURACY), progress
    # Progress was visible to `kubectl get dtj` (the STEP column) while the job ran: a row
    # printed then shows a step, at least the one the JSON get of the same poll read and at
    # most the last. The printed get follows the JSON one, and steps land between them (200
    # read, 300 printed, once under load; 120 read, 200 printed on 2026-11-30). A job can
    # also start training and finish between two polls (DataParallel's 300 steps took 2 s
    # on the machine of 2026-11-29 evening, the poll is 2 s): then the row printed once it
    # had finished.
    rows = seen.rows or ([seen.final] if seen.final else [])
    total = progress["step"]
    shown = any(
        token.isdigit() and read <= int(token) <= total
        for read, row in rows
        for token in row.split()
    )
    assert shown, (seen.rows, seen.final)


def test_cpu_examples_mirror_the_gpu_ones() -> None:
    gpu = {p.stem for p in Path(REPO / "examples").glob("*.yaml")}
    assert set(EXAMPLES) == gpu
