"""bench/gpu_claims.py's `ps` section: the parameter-server modes computing on the GPU
against DataParallel on the same GPU, in samples/s.

Every run trains an fp32 MLP of 4 hidden layers of 2048 on digits with SGD, 512 samples a
step for every computing process (DataParallel: 1 worker, over nccl; Sync, Async and
asynchronous EASGD: 2 workers and 1 server; Hogwild: 1 worker of 2 processes; the
parameter-server protocol goes over gloo through host memory), 400 steps logged every 5.
A run gets an equal share of the section's time; one that needs more is cut there and its
logged intervals still give its rate (the median of the intervals but the first, which
pays for the warm-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from claims_common import CHILD_MARGIN_SECONDS, Deadline, Row, emit, fmt, on_gpu, section_header
from claims_launch import MIN_LAUNCH_SECONDS, launch_job, trainer_env, workspace


@dataclass(frozen=True)
class PsSizes:
    """The parameter-server comparison's MLP and run lengths."""

    hidden: tuple[int, ...]
    batch: int
    """Samples of one step of each computing process."""
    steps: int
    """Steps of every run: enough for the fast modes' intervals to be measurable; a slow
    one is cut at its share of the time (its logged intervals still give its rate)."""
    log_every: int
    threads: int
    launch_seconds: float


GPU_PS = PsSizes((2048,) * 4, 512, 400, 5, 4, 30.0)
CPU_PS = PsSizes((64, 64), 32, 16, 4, 1, 300.0)
# What the rehearsal runs of PS_RUNS: the launch, rate and ratio code of every run is the
# same; DataParallel (the reference) and one parameter-server mode show it works.
REHEARSED_PS = ("DataParallel", "PS-Async")


# name -> (strategy, parameterServer settings, workers, ps replicas, processes per worker)
PS_RUNS: dict[str, tuple[str, dict[str, Any], int, int, int]] = {
    "DataParallel": ("DataParallel", {}, 1, 0, 1),
    "PS-Sync": ("ParameterServer", {"mode": "Sync"}, 2, 1, 1),
    "PS-Async": ("ParameterServer", {"mode": "Async"}, 2, 1, 1),
    "PS-EASGD-async": ("ParameterServer", {"mode": "EASGD"}, 2, 1, 1),
    "PS-Hogwild": ("ParameterServer", {"mode": "Hogwild", "hogwildProcesses": 2}, 1, 0, 2),
}


def ps_spec(name: str, s: PsSizes, gpu: bool) -> dict[str, Any]:
    """One of PS_RUNS: workers on the GPU (one GPU shared) with every computing process
    taking `s.batch` samples a step; DataParallel over nccl, the rest over gloo."""
    strategy, ps, workers, servers, procs = PS_RUNS[name]
    roles: dict[str, Any] = {"worker": {"replicas": workers}}
    if gpu:
        roles["worker"].update(gpus=1, procsPerPod=1)
    if servers:
        roles["ps"] = {"replicas": servers}
    strat: dict[str, Any] = {"type": strategy, "backend": "gloo"}
    if ps:
        strat["parameterServer"] = ps
    elif gpu:
        strat["backend"] = "nccl"
    return {
        "strategy": strat,
        "roles": roles,
        "trainer": {
            "model": {"type": "MLP", "hiddenSizes": list(s.hidden)},
            "optimizer": {"type": "SGD", "lr": 0.01},
            "batchSize": s.batch * workers * procs,
            "steps": s.steps,
            "logEverySteps": s.log_every,
            "precision": "fp32",
        },
        "checkpoint": {"everySteps": 100000, "keep": 1},
        "network": {"rendezvousTimeoutSeconds": 60},
    }


def section_ps(rehearse: bool, seconds: float, cap_gib: float, tmp: str | None) -> None:
    gpu = on_gpu(rehearse)
    s = GPU_PS if gpu else CPU_PS
    runs: dict[str, Any] = {}
    record: dict[str, Any] = {
        **section_header(rehearse),
        "model": {"type": "MLP", "hiddenSizes": list(s.hidden), "dataset": "digits"},
        "optimizer": "SGD fp32",
        "batch_per_computing_process": s.batch,
        "steps": s.steps,
        "threads_per_process": s.threads,
        "log_every_steps": s.log_every,
        "rate": "samples/s of all computing processes (rank 0's global steps x the global "
        "batch), median of the logged intervals but the first",
        "runs": runs,
    }
    deadline = Deadline(seconds - CHILD_MARGIN_SECONDS)
    env = trainer_env({"OMP_NUM_THREADS": str(s.threads)})
    with workspace("gpu-claims-ps-", tmp) as work:
        chosen = {k: v for k, v in PS_RUNS.items() if gpu or k in REHEARSED_PS}
        for i, (name, (_, _, workers, servers, procs)) in enumerate(chosen.items()):
            row: dict[str, Any] = {
                "workers": workers,
                "servers": servers,
                "computing_processes": workers * procs,
            }
            runs[name] = row
            # An equal share of what is left: a run that does not need it leaves it.
            timeout = min(s.launch_seconds, deadline.left() / (len(chosen) - i))
            if timeout < MIN_LAUNCH_SECONDS:
                row["skipped"] = "the section's time is spent"
                continue
            out = launch_job(ps_spec(name, s, gpu), work, name, timeout, env)
            row.update(out.summary())
            base = runs["DataParallel"].get("samples_per_second")
            if base and row.get("samples_per_second"):
                row["ratio_to_data_parallel"] = round(row["samples_per_second"] / base, 3)
            emit(record)


def ps_rows(ps: dict[str, Any]) -> list[Row]:
    rows = []
    for name, row in ps.get("runs", {}).items():
        value = f"{fmt(row.get('samples_per_second'))} ({fmt(row.get('ratio_to_data_parallel'))})"
        if row.get("cut_at_step") is not None:
            value += f", cut at step {row['cut_at_step']}"
        if row.get("samples_per_second") is None:
            value = str(row.get("skipped") or row.get("error"))
        rows.append((f"{name} samples/s (ratio to DataParallel)", value))
    return rows
