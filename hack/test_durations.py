"""Where the test suite's time goes: bench/results/test_durations.json and a short summary.

    python3 hack/test_durations.py [--reports .test-reports] [--out PATH] [--top 30]

Reads what `make test` leaves in its reports folder (TEST_REPORTS, default
.test-reports/): `phases.tsv` (hack/timed.sh: each step's wall time and exit code) and one
junit XML per pytest tier (`unit.xml`, `integration.xml`, `e2e.xml`, `gpu-rehearsal.xml`;
the steps of the side-by-side lanes of hack/test-lanes.sh are the "lane:" phases). Writes
the phases, each tier's total, every file's total, the top tests and those over 120 s,
then prints the summary that ends every `.ci/run` log. Standard library only: it runs
after a failed `make test` too, whatever state the venv is in.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# A failure's message is kept this long: CI shows only the log's tail, which this summary
# ends, so the summary names every failed test and why.
MESSAGE = 1000
SHOWN = 600  # of it in the summary, in lines of 100
OVER = 120.0  # DESIGN/issue budget: no single test over this unless the report says why
# Why a test may take longer, by the start of its id: the report names the reason, and a test
# over the budget without one is listed as such.
WHY_OVER = {
    "tests.e2e.test_training::test_example_trains_to_succeeded": (
        "the first of these waits for the whole fleet: every examples/cpu job applied at once "
        "trains 300 steps (the accuracy the examples promise) on the real node's 2 CPUs"
    ),
    "tests.integration.operator.test_robustness::test_operator_outlives_a_control_plane": (
        "a 75 s outage (longer than kopf's default retries, 54 s), then the control plane's "
        "own recovery: the scheduler's and controller-manager's watches back off"
    ),
    "tests.e2e.test_custom_image::test_torchrun_child_retryable_code_restarts": (
        "a real torchrun gang in containers, restarted on exit code 75 and resumed from its "
        "PVC: two gang starts and 200 steps at 250m CPU a pod"
    ),
    "tests.e2e.test_fault::test_killed_container_restarts_gang": (
        "a container killed mid-run: a gang restart in containers and a resume from the PVC "
        "checkpoint, 300 steps at 250m CPU a pod"
    ),
    "tests.e2e.test_kueue::test_a_job_preempted_through_kueue_resumes": (
        "two real gangs one after the other through the real Kueue (1500 steps preempted "
        "after its first checkpoint, a 100-step preemptor, then the resume), each gang start "
        "a container start at 250m CPU a pod: 221 s here"
    ),
    "tests.e2e.test_elastic::test_elastic_example_grows": (
        "2400 steps at 1 then 2 pods beside a fixed twin on the real node's 2 CPUs: the run "
        "must outlast the growth (up to two 10 s admission timer passes and a gang restart) "
        "on an idle machine too, where 600 steps ended before it"
    ),
    (
        "tests.unit.trainer.test_resume_async::"
        "test_sigterm_then_resume_loses_and_repeats_no_update[Hogwild]"
    ): (
        "three launches (uninterrupted, stopped by SIGTERM, resumed) of 6 processes, 3000 "
        "Hogwild steps each so that SIGTERM lands mid-run: CPU-bound on the unit lane's share "
        "of 2 CPUs, 53 s in the least loaded CI run and 107-190 s in the others"
    ),
    "tests.e2e.test_stall::test_a_hung_rank_is_declared_stalled": (
        "a real gang in containers hangs one rank, waits out its 30 s progress deadline, is "
        "restarted (SIGTERM, checkpoint, new pods) and must train again from the checkpoint"
    ),
    "tests.unit.trainer.test_speed_tensor_parallel::test_compiled_split": (
        "on a cold Inductor cache (a new machine) every rank compiles its graphs with gcc; "
        "warm, seconds"
    ),
    "tests.unit.trainer.test_speed_pipelines::test_compiled_stages": (
        "on a cold Inductor cache (a new machine) every rank compiles its graphs with gcc; "
        "warm, seconds"
    ),
}


def why_over(test: str) -> str | None:
    return next((why for start, why in WHY_OVER.items() if test.startswith(start)), None)


def read_phases(path: Path) -> list[dict[str, Any]]:
    phases = []
    if path.is_file():
        for line in path.read_text().splitlines():
            name, seconds, rc, *more = line.split("\t")
            phase: dict[str, Any] = {"phase": name, "seconds": float(seconds), "rc": int(rc)}
            if more and more[0] != "-":  # hack/timed.sh's CPU seconds, where it could count
                phase["cpu_seconds"] = float(more[0])
            phases.append(phase)
    return phases


def read_tier(path: Path) -> list[dict[str, Any]]:
    """Every test case of one junit XML: id, file, seconds, outcome."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error"}.get(tag, tag)
                message = found.get("message") or (found.text or "")
        # tests/conftest.py's CPU seconds of the test, where the record has them.
        props = {q.get("name"): q.get("value") for q in case.iter("property")}
        cpu = {"cpu_s": round(float(props["cpu_s"]), 2)} if props.get("cpu_s") else {}
        # xunit1 (make test's) names the file; else guess it from the module path.
        file = case.get("file") or (classname.replace(".", "/") + ".py" if classname else "?")
        cases.append(
            {
                "test": f"{classname}::{name}",
                "file": file,
                "seconds": round(float(case.get("time", "0") or 0), 2),
                "outcome": outcome,
                **cpu,
                **({"message": message[:MESSAGE]} if outcome in ("failed", "error") else {}),
            }
        )
    return cases


def read_load(path: Path) -> dict[str, Any]:
    """hack/test-lanes.sh's load samples: the 1-minute load average's mean and maximum, and
    the commands most often among the six busiest processes, with their mean CPU % then."""
    loads: list[float] = []
    seen: dict[str, list[float]] = defaultdict(list)
    extra: dict[str, float] = {}
    try:
        text = path.read_text()
    except OSError:
        return {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "load":
            loads.append(float(words[2]))
        elif len(words) == 2 and words[0] in ("gauge_seconds", "containers_cpu_seconds"):
            extra[words[0]] = float(words[1])
        elif len(words) >= 3 and words[0] == "proc":
            # The program and its first two arguments ("python -m dtjob_trainer"), cut short.
            command = " ".join(w.rsplit("/", 1)[-1] for w in words[2:5])[:48]
            try:
                seen[command].append(float(words[1]))
            except ValueError:
                continue
    if not loads:
        return extra
    busiest = sorted(seen.items(), key=lambda kv: -sum(kv[1]))[:8]
    return {
        **extra,
        "samples": len(loads),
        "load1_mean": round(sum(loads) / len(loads), 1),
        "load1_max": max(loads),
        "busiest": [
            {"command": cmd, "samples": len(v), "mean_cpu_percent": round(sum(v) / len(v))}
            for cmd, v in busiest
        ],
    }


def report(reports: Path, top: int) -> dict[str, Any]:
    tiers: dict[str, list[dict[str, Any]]] = {
        xml.stem: read_tier(xml) for xml in sorted(reports.glob("*.xml"))
    }
    # rerun-<tier>: the failed tests hack/test-lanes.sh ran again alone (hack/failed_tests.py).
    # A failure that passed there is FLAKY; the second runs stay out of the files and tops.
    first = {t: cases for t, cases in tiers.items() if not t.startswith("rerun-")}
    passed_again = {
        c["test"]
        for t, cases in tiers.items()
        if t.startswith("rerun-")
        for c in cases
        if c["outcome"] == "passed"
    }
    files: dict[str, float] = defaultdict(float)
    files_cpu: dict[str, float] = defaultdict(float)
    for cases in first.values():
        for c in cases:
            files[c["file"]] += c["seconds"]
            files_cpu[c["file"]] += c.get("cpu_s", 0.0)
    everything = sorted(
        (dict(c, tier=t) for t, cases in first.items() for c in cases),
        key=lambda c: -c["seconds"],
    )
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "ci": os.environ.get("CI") == "true",
        "phases": read_phases(reports / "phases.tsv"),
        "load": read_load(reports / "load.txt"),
        "tiers": {
            t: {
                "tests": len(cases),
                "seconds": round(sum(c["seconds"] for c in cases), 1),
                "failed": sum(c["outcome"] in ("failed", "error") for c in cases),
                "skipped": sum(c["outcome"] == "skipped" for c in cases),
            }
            for t, cases in tiers.items()
        },
        "files": [
            {"file": f, "seconds": round(s, 1), "cpu_s": round(files_cpu[f], 1)}
            for f, s in sorted(files.items(), key=lambda kv: -kv[1])
        ],
        # The lanes share the cores: CPU, not wall time, is what a test takes from the others.
        "top_cpu_tests": sorted((c for c in everything if "cpu_s" in c), key=lambda c: -c["cpu_s"])[
            :top
        ],
        "failed": [
            dict(c, flaky=c["test"] in passed_again)
            for c in everything
            if c["outcome"] in ("failed", "error")
        ],
        "top_tests": everything[:top],
        "over_120s": [{**c, "why": why_over(c["test"])} for c in everything if c["seconds"] > OVER],
    }


def minutes(seconds: float) -> str:
    return f"{seconds / 60:5.1f} min"


def summary(rec: dict[str, Any], top: int = 10) -> str:
    lines = ["== test timing summary (hack/test_durations.py)"]
    # "lane:<step>" phases ran inside "lanes", side by side (hack/test-lanes.sh): shown
    # indented under it, and not added to the total a second time.
    in_lanes = [p for p in rec["phases"] if p["phase"].startswith("lane:")]
    outer = [p for p in rec["phases"] if not p["phase"].startswith("lane:")]
    total = sum(p["seconds"] for p in outer)
    for p in outer:
        for q in [p, *in_lanes] if p["phase"] == "lanes" else [p]:
            mark = "" if q["rc"] == 0 else f"  (exit {q['rc']})"
            cpu = f"  CPU {minutes(q['cpu_seconds'])}" if "cpu_seconds" in q else ""
            name = f"  {q['phase'][5:]}" if q is not p else p["phase"]
            lines.append(f"  {name:<22} {minutes(q['seconds'])}{cpu}{mark}")
    if rec["phases"]:
        lines.append(f"  {'total':<22} {minutes(total)}")
    load = rec.get("load") or {}
    if "load1_mean" in load:
        lines.append(
            f"  load average {load['load1_mean']} (max {load['load1_max']}) over "
            f"{load['samples']} samples; busiest: "
            + ", ".join(
                f"{b['command']} {b['mean_cpu_percent']}% x{b['samples']}"
                for b in load["busiest"][:6]
            )
        )
    if "containers_cpu_seconds" in load:
        lines.append(
            f"  CPU of the real node's containers (not in the lanes' figures): "
            f"{minutes(load['containers_cpu_seconds'])}"
        )
    if "gauge_seconds" in load:
        lines.append(
            f"  machine speed gauge: {load['gauge_seconds']:.2f} s for hack/test-lanes.sh's "
            f"fixed pure-Python loop before the lanes (lower is faster)"
        )
    for tier, t in rec["tiers"].items():
        lines.append(
            f"  tier {tier:<17} {minutes(t['seconds'])} in tests, {t['tests']} tests, "
            f"{t['failed']} failed, {t['skipped']} skipped"
        )
    failed = rec.get("failed", [])
    for c in failed:
        lines.append(f"  {_verdict(c)} ({c['tier']}, {c['seconds']:.0f} s) {c['test']}")
        said = " ".join(c.get("message", "").split())[:SHOWN]
        lines.extend(f"      {said[i : i + 100]}" for i in range(0, len(said), 100))
    lines.append(f"  slowest {top} tests:")
    for c in rec["top_tests"][:top]:
        lines.append(f"    {c['seconds']:7.1f} s  {c['test']}")
    lines.append(f"  slowest {top} files:")
    for f in rec["files"][:top]:
        lines.append(f"    {f['seconds']:7.1f} s  {f['file']}")
    if rec.get("top_cpu_tests"):
        lines.append(f"  most CPU, {top} tests (their process and the children they waited for):")
        for c in rec["top_cpu_tests"][:top]:
            lines.append(f"    {c['cpu_s']:7.1f} CPU-s  {c['test']}")
        by_cpu = sorted(rec["files"], key=lambda f: -f.get("cpu_s", 0.0))[:top]
        lines.append(f"  most CPU, {top} files:")
        lines.extend(f"    {f.get('cpu_s', 0.0):7.1f} CPU-s  {f['file']}" for f in by_cpu)
    if rec["over_120s"]:
        unexplained = [c for c in rec["over_120s"] if not c.get("why")]
        lines.append(
            f"  {len(rec['over_120s'])} tests over {OVER:.0f} s, "
            f"{len(unexplained)} without a reason (hack/test_durations.py WHY_OVER)"
        )
        for c in unexplained:
            lines.append(f"    {c['seconds']:7.1f} s  {c['test']}")
    # The failed tests' names once more, last: CI shows a long log's head and tail only.
    if failed:
        lines.append(f"  {len(failed)} failed in the lanes:")
        lines.extend(f"    {_verdict(c)} ({c['tier']}) {c['test']}" for c in failed)
    return "\n".join(lines)


def _verdict(case: dict[str, Any]) -> str:
    if case.get("flaky"):
        return "FLAKY (passed alone)"
    return str(case["outcome"]).upper()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(os.environ.get("TEST_REPORTS", REPO / ".test-reports"))
    parser.add_argument("--reports", type=Path, default=default)
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/test_durations.json")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if not args.reports.is_dir():
        print(f"test_durations: no reports in {args.reports}")
        return
    rec = report(args.reports, args.top)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, indent=1) + "\n")
    print(summary(rec))
    print(f"  (full report: {args.out})")


if __name__ == "__main__":
    main()
