"""Three claims of the bundled trainer measured on one GPU (bench/results/gpu_claims.json):

1. `hetero`, the heterogeneous pipeline (roles.stage.groups, docs/strategies.md): the
   deepest GPT that trains on a GPU stage alone under a memory cap of `--cap-gib`
   (default 2 GiB), whether models 2 and 3 times as deep train with 1 and 2 CPU stages in
   front, and what 1 CPU stage costs in samples/s (bench/claims_hetero.py).
2. `ps`: samples/s of the parameter-server modes computing on the GPU against
   DataParallel on the same GPU (bench/claims_ps.py).
3. `async`, the stall of a background sharded checkpoint (async_checkpoint.AsyncSaver) of
   an FSDP2 GPT of 507M parameters trained by one rank (bench/claims_async.py).

Each section's module docstring says what it runs and measures. Launching the trainer,
and the bench-only start-up hook that caps the heterogeneous section's GPU stage, are in
bench/claims_launch.py; what the sections share is in bench/claims_common.py. This file
runs them. It is started as a script (bench/gpu.py does so), which puts bench/ first on
sys.path: the claims_*.py modules import as siblings. Like this one, they import only the
standard library and torch (the GPU machine's image has nothing else).

    PYTHONPATH=api:trainer_image python bench/gpu_claims.py [--budget SECONDS] [--out PATH]
        [--rehearse] [--sections hetero,ps,async] [--cap-gib 2] [--tmp DIR]

`--rehearse`, or no CUDA, runs every section's code on the CPU with tiny sizes (gloo, CPU
stages and workers; no cap is enforced), the rehearsal before a GPU window; its records
say "device": "cpu", "rehearsal": true. Every section runs in a child process of its own
(`--one`), so an out-of-memory or a crash costs that section only: its record then has
{"error": its last stderr line} beside what it had measured, and its stderr (with every
launch's output) is kept beside the record as <out>-<section>.log. The sections share one
`--budget` in proportion to their nominal seconds on a GPU (100, 70, 40; what one leaves
goes to the later ones), a child ends its launches in flight when its time is up, and the
record is rewritten after each section, so a run killed from outside keeps the sections
taken so far. A short table of the figures ends the output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from claims_async import async_rows, section_async
from claims_common import GIB, REPO, Deadline, Row, on_gpu
from claims_hetero import hetero_rows, section_hetero
from claims_launch import stop_running, trainer_env
from claims_ps import ps_rows, section_ps

RESULTS = REPO / "bench" / "results" / "gpu_claims.json"
SECTIONS = ("hetero", "ps", "async")
# Seconds each section is meant to take on the GPU machine: the budget is shared out in
# these proportions (what a section leaves unused goes to the later ones).
NOMINAL_SECONDS = {"hetero": 100.0, "ps": 70.0, "async": 40.0}
# A child started with less than this could not even start its first process.
MIN_CHILD_SECONDS = 15.0


RUNNERS: dict[str, Callable[[bool, float, float, str | None], None]] = {
    "hetero": section_hetero,
    "ps": section_ps,
    "async": section_async,
}


def last_json(text: str) -> dict[str, Any] | None:
    """The last line of `text` that is a whole JSON object."""
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    return None


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def child(section: str, seconds: float, args: argparse.Namespace) -> dict[str, Any]:
    """Run one section in a fresh process (a session of its own, so its launches can be
    ended with it) for at most `seconds`: its record, with {"error": ...} when it died or
    ran out of time (keeping what it had measured)."""
    cmd = [sys.executable, __file__, "--one", section, "--seconds", f"{seconds:.0f}"]
    cmd += ["--cap-gib", str(args.cap_gib)] + (["--rehearse"] if args.rehearse else [])
    if args.tmp:
        cmd += ["--tmp", args.tmp]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=seconds)
        error = None
    except subprocess.TimeoutExpired:
        proc.terminate()  # the child ends its launch in flight, then itself
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = _text(exc.stdout), _text(exc.stderr)
            proc.wait()
        error = f"timed out after {seconds:.0f} s"
    # Its stderr (with every launch's output) beside the record, for a post-mortem.
    log = args.out.with_name(f"{args.out.stem}-{section}.log")
    log.write_text(stderr)
    record = last_json(stdout) or {}
    record["log"] = log.name
    if error is None and proc.returncode < 0:
        error = f"killed by signal {-proc.returncode}"
    elif error is None and proc.returncode != 0:
        error = (stderr.strip().splitlines() or [f"exit {proc.returncode}, no output"])[-1]
    if error is not None:
        record["error"] = error[:300]
    record["section_seconds"] = round(time.monotonic() - start, 1)
    return record


def machine() -> dict[str, Any]:
    """What the figures were taken on."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / GIB, 1))
    return info


def shares(sections: list[str]) -> Iterator[tuple[str, float]]:
    """Each section with its share of what is left when it starts (by NOMINAL_SECONDS):
    time a section leaves unused goes to the ones after it."""
    for i, section in enumerate(sections):
        rest = sum(NOMINAL_SECONDS[s] for s in sections[i:])
        yield section, NOMINAL_SECONDS[section] / rest


TABLE_ROWS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "hetero": hetero_rows,
    "ps": ps_rows,
    "async": async_rows,
}


def table(record: dict[str, Any]) -> str:
    """A few lines for a person: the figures that answer each claim, and the errors."""
    lines = [f"{'section':8} {'figure':50} value"]
    for section in SECTIONS:
        part = record.get(section)
        if not part:
            continue
        rows = TABLE_ROWS[section](part)
        for key in ("skipped", "error"):
            if key in part:
                rows.append((key.upper(), str(part[key])))
        lines += [f"{section:8} {figure:50} {value}" for figure, value in rows]
    return "\n".join(lines)


def measure(record: dict[str, Any], args: argparse.Namespace, write: Callable[[], None]) -> None:
    """Every section in its own child, sharing the budget; the record written after each."""
    deadline = Deadline(args.budget)
    wanted = [s for s in SECTIONS if s in args.sections.split(",")]
    for section, share in shares(wanted):
        seconds = share * deadline.left()
        if seconds < MIN_CHILD_SECONDS:
            record[section] = {"skipped": f"the budget was spent ({deadline.left():.0f} s left)"}
        else:
            record[section] = child(section, seconds, args)
        write()
    record["seconds"] = round(args.budget - deadline.left(), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for all")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rehearse", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--cap-gib", type=float, default=2.0, help="GPU cap of hetero")
    parser.add_argument("--tmp", default=None, help="where launches and checkpoints go")
    parser.add_argument("--one", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=60.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        signal.signal(signal.SIGTERM, stop_running)
        RUNNERS[args.one](args.rehearse, args.seconds, args.cap_gib, args.tmp)
        return
    record: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "rehearsal": not on_gpu(args.rehearse),
        "budget_seconds": args.budget,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.replace(args.out)

    measure(record, args, write)
    write()
    print(table(record))


if __name__ == "__main__":
    main()
