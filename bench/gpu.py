"""GPU figures of the bundled trainer's GPT on one GPU (bench/results/gpu.json):

1. throughput and MFU of bf16 training (autocast, fused AdamW, TF32) for GPT-3's 350M,
   760M and 1.3B shapes at sequence length 1024 (bench/gpu_mfu.py);
2. the largest GPT that trains one step under a capped GPU memory
   (`torch.cuda.set_per_process_memory_fraction`), plain PyTorch (everything on the GPU)
   against CPUOffload (FSDP2 with CPUOffloadPolicy, as the trainer runs it)
   (bench/gpu_memory.py);
3. the peak GPU memory of the trainer's evaluation (chunked logits) against the logits of
   the whole evaluation set at once (bench/gpu_memory.py).

Each measurement's code is in the module named beside it, whose docstring says what it
runs; the GPT shapes and the training steps they share are in bench/gpu_mfu.py. This file
runs them, and bench/gpu_claims.py. It is started as a script, which puts bench/ first on
sys.path: gpu_mfu.py and gpu_memory.py import as siblings.

    PYTHONPATH=trainer_image:api python bench/gpu.py [--fraction 0.25] [--steps 20]
        [--budget SECONDS] [--out PATH]

Without CUDA it writes a record that says why it skipped. Every measurement runs in a
child process of its own (`--one ...`), so an out-of-memory or a crash costs that figure
only and is recorded as such. A GPU window is short (docs/gpu.md), so the measurements
run cheapest first under one `--budget`: each child gets what is left of it, one that
would start with too little is recorded as skipped, and the record is rewritten after
every child, so a run killed from outside still leaves every figure taken so far.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from gpu_memory import one_capped, one_evaluation
from gpu_mfu import SEQ, SIZES, VOCAB, one_bigger, one_profile, one_throughput

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "gpu.json"
# d_model of the capped-memory search (24 layers each), smallest first.
CAPPED_WIDTHS = (512, 768, 1024, 1536, 2048, 2560, 3072, 4096)
CHILD_TIMEOUT = 1200
# A child started with less than this left of the budget could not even build its model.
MIN_CHILD_SECONDS = 15.0


def machine() -> dict[str, Any]:
    """What the figures were taken on."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": platform.node(),
    }
    try:
        from dtjob_trainer.cuda_diag import DRIVER_VERSION_FILE, driver_version_from

        info["driver"] = driver_version_from(Path(DRIVER_VERSION_FILE).read_text())
    except OSError:
        info["driver"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
    return info


# --- the parent: run the children, collect, write ---------------------------------------


class Budget:
    """What is left of the run's time, in seconds; monotonic, so clock steps do not
    matter."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def child(budget: Budget, *args: str) -> dict[str, Any]:
    """Run one measurement in a fresh process, bounded by what is left of the budget: its
    JSON, or the error it died of, or why it never started."""
    timeout = min(CHILD_TIMEOUT, budget.left())
    if timeout < MIN_CHILD_SECONDS:
        return {"skipped": f"the budget was spent ({max(0.0, timeout):.0f} s left)"}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "trainer_image"), str(REPO / "api"), env.get("PYTHONPATH", "")]
    )
    cmd = [sys.executable, __file__, "--one", *args]
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        result: dict[str, Any] = json.loads(lines[-1])
        return result
    tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"error": tail[:300]}


def largest(mode: str, fraction: float, budget: Budget, top_first: bool) -> dict[str, Any]:
    """The widest GPT of CAPPED_WIDTHS that trains under the cap, by bisection (fitting is
    monotone in the width), with every attempt. `top_first` tries the widest first: for
    CPUOffload, where the widest usually fits and every attempt is the dearest, one child
    then answers. An attempt that errs counts as not fitting; one the budget skipped ends
    the search with what is known."""
    tried: list[dict[str, Any]] = []
    fits, fails = -1, len(CAPPED_WIDTHS)  # indices known to fit / not to fit
    best: dict[str, Any] | None = None
    probe = fails - 1 if top_first else (fits + fails) // 2
    while fails - fits > 1:
        width = CAPPED_WIDTHS[probe]
        out = child(budget, "capped", mode, str(width), str(fraction))
        tried.append({"d_model": width, **out})
        if "skipped" in out:
            break
        if "error" in out:
            fails = probe
        else:
            fits, best = probe, out
        probe = (fits + fails) // 2
    return {"largest": best, "attempts": tried}


# Compiled variants after the eager baselines: the trainer's `trainer.compile` (blocks
# only, then blocks and loss, as the trainer compiles them on CUDA), then a larger batch
# (after the claims: it recompiles every graph for its shape).
COMPILED = (("1.3B", "compile=1"), ("350M", "compile=1"))
LATER = (("350M", "compile=1", "loss=0"), ("350M", "compile=1", "batch=32"), ("760M", "compile=1"))
# The largest GPT trained at >= 40 % MFU: (layers, d_model, heads, batch), widest first
# (head dimension 128); the first that fits the GPU's memory estimate is tried first.
BIGGER = ((32, 4096, 32, 8), (32, 3072, 24, 8), (32, 2560, 20, 8))
BIGGER_MFU = 0.40
# What the parameter-server, heterogeneous-pipeline and checkpoint measurements
# (bench/gpu_claims.py) get of the budget at most, and what is kept back for the capped
# searches after them.
CLAIMS_SECONDS = 170.0


def bigger_first(memory_bytes: int) -> int:
    """Index in BIGGER of the widest model whose training state (fp32 weights, gradients
    and Adam's two moments: 16 bytes a parameter) fits 85 % of the GPU's memory, leaving
    room for the checkpointed activations and the logits."""
    from dtjob_trainer.models.gpt import gpt_parameter_count

    for i, (layers, d_model, _, _) in enumerate(BIGGER):
        if 16 * gpt_parameter_count(layers, d_model, SEQ, VOCAB) <= 0.85 * memory_bytes:
            return i
    return len(BIGGER) - 1


def measure_bigger(budget: Budget) -> dict[str, Any]:
    """The widest of BIGGER that trains at >= BIGGER_MFU with activation checkpointing and
    compiled blocks: from the widest the memory allows, narrower until one reaches it."""
    memory = torch.cuda.get_device_properties(0).total_memory
    tried: list[dict[str, Any]] = []
    best = None
    for shape in BIGGER[bigger_first(memory) :]:
        out = child(budget, "bigger", *map(str, shape))
        tried.append(out)
        if "skipped" in out:
            break
        if "error" not in out and (out.get("mfu") or 0) >= BIGGER_MFU:
            best = out
            break
    return {"mfu_at_least": BIGGER_MFU, "largest": best, "attempts": tried}


def claims(budget: Budget, seconds: float, rehearse: bool) -> dict[str, Any]:
    """bench/gpu_claims.py's record (heterogeneous pipeline, parameter servers, background
    checkpoint), in a process of its own, bounded by `seconds` of the budget."""
    seconds = min(seconds, budget.left())
    if seconds < MIN_CHILD_SECONDS:
        return {"skipped": f"the budget was spent ({max(0.0, seconds):.0f} s left)"}
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu-claims-{os.getpid()}.json"
    cmd = [sys.executable, str(REPO / "bench" / "gpu_claims.py"), "--budget", f"{seconds:.0f}",
           "--out", str(out), *(["--rehearse"] if rehearse else [])]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 10)
    except subprocess.TimeoutExpired:
        done = None
    sys.stderr.write(done.stdout + done.stderr if done else "gpu_claims: timed out\n")
    try:
        record: dict[str, Any] = json.loads(out.read_text())
    except (OSError, ValueError):
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1] if done else "timed out"
        return {"error": tail[:300]}
    return record


SECTIONS = ("evaluation", "eager", "profile", "compiled", "claims", "bigger", "later", "capped")


def measure(record: dict[str, Any], args: argparse.Namespace, write: Callable[[], None]) -> None:
    """The measurements of `args.sections`, in order of what the window must not miss,
    writing the record after each: the first run's figures on this card (the baseline),
    the profile, the compiled variants, the claims, the largest model, the rest, the
    capped searches."""
    budget = Budget(args.budget)
    wanted = set(args.sections)
    record["budget_seconds"] = args.budget
    if "evaluation" in wanted:
        record["evaluation"] = child(budget, "evaluation")
        write()
    record["throughput_bf16"] = []
    record["throughput_bf16_compiled"] = []
    if "eager" in wanted:
        for name in ("350M", "1.3B"):
            record["throughput_bf16"].append(child(budget, "throughput", name))
            write()
    if "compiled" in wanted:
        for variant in COMPILED:
            record["throughput_bf16_compiled"].append(child(budget, "throughput", *variant))
            write()
    if "bigger" in wanted:
        record["bigger"] = measure_bigger(budget)
        write()
    if "profile" in wanted:
        record["profile_350M"] = child(budget, "profile", "350M")
        write()
    if "claims" in wanted:
        record["claims"] = claims(budget, CLAIMS_SECONDS, False)
        write()
    if "later" in wanted:
        record["throughput_bf16"].append(child(budget, "throughput", "760M"))
        for later in LATER:
            record["throughput_bf16_compiled"].append(child(budget, "throughput", *later))
        write()
    if "capped" in wanted:
        record["capped_memory"] = capped_searches(args, budget, write)
    record["seconds"] = round(args.budget - budget.left(), 1)
    write()


def capped_searches(
    args: argparse.Namespace, budget: Budget, write: Callable[[], None]
) -> dict[str, Any]:
    """The largest GPT under the memory cap, plain and with CPUOffload."""
    memory = torch.cuda.get_device_properties(0).total_memory
    capped: dict[str, Any] = {
        "fraction": args.fraction,
        "cap_gib": round(args.fraction * memory / 2**30, 1),
    }
    capped["plain"] = largest("plain", args.fraction, budget, top_first=False)
    write()
    capped["cpu_offload"] = largest("cpu_offload", args.fraction, budget, top_first=True)
    plain, offload = capped["plain"]["largest"], capped["cpu_offload"]["largest"]
    if plain and offload:
        capped["offload_to_plain_parameters"] = round(
            offload["parameters"] / plain["parameters"], 2
        )
    return capped


def rehearse(record: dict[str, Any], args: argparse.Namespace, write: Callable[[], None]) -> None:
    """Without CUDA: every new measurement's code on the CPU with tiny models (the same
    children, trainer speed options and claims), so a fault of the GPU image's torch or
    of this script shows here and not in a GPU window. The figures mean nothing."""
    budget = Budget(args.budget)
    record["rehearsal"] = True
    record["throughput_bf16"] = [child(budget, "throughput", "tiny")]
    record["throughput_bf16_compiled"] = [
        child(budget, "throughput", "tiny", "compile=1", "ckpt=1"),
    ]
    record["profile"] = child(budget, "profile", "tiny")
    write()
    record["bigger"] = {"attempts": [child(budget, "bigger", *map(str, SIZES["tiny"]))]}
    write()
    record["claims"] = claims(budget, budget.left(), True)
    record["seconds"] = round(args.budget - budget.left(), 1)


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement (a child's `--one KIND ...`)."""
    kind, *rest = args.one
    if kind == "throughput":
        return one_throughput(rest[0], args.steps if torch.cuda.is_available() else 2, *rest[1:])
    if kind == "profile":
        return one_profile(rest[0])
    if kind == "bigger":
        layers, d_model, heads, batch = map(int, rest[:4])
        return one_bigger(layers, d_model, heads, batch, *rest[4:])
    if kind == "capped":
        return one_capped(rest[0], int(rest[1]), float(rest[2]))
    return one_evaluation()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.25)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds for all")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--sections",
        type=lambda v: [x for x in v.split(",") if x],
        default=list(SECTIONS),
        help=f"comma-separated, of {','.join(SECTIONS)} (default: all, in that order)",
    )
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if unknown := set(args.sections) - set(SECTIONS):
        parser.error(f"--sections: unknown {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if args.one:
        print(json.dumps(run_one(args)))
        return
    record: dict[str, Any] = {"machine": machine(), "date": time.strftime("%Y-%m-%d")}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.replace(args.out)

    if not torch.cuda.is_available():
        record["skipped"] = "no CUDA device visible to torch"
        rehearse(record, args, write)
    else:
        measure(record, args, write)
    write()
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
