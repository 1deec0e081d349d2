"""Throughput of the bundled trainer against a plain PyTorch script doing the same
computation (same model, global batch, optimizer and process count; CPU, gloo), for
DataParallel (DDP) and FSDP; and CPU offload's peak GPU memory against plain FSDP, which
needs CUDA (recorded as skipped without it).

    PYTHONPATH=trainer_image:api python bench/trainer_throughput.py [--steps 150] [--repeats 2]

Writes bench/results/trainer_throughput.json. Each variant runs `repeats` times,
alternating, and the best counts. Both sides time all their steps (first included),
excluding process start-up, in wall-clock time and in rank 0's CPU time: on a shared,
loaded host the wall-clock figures are noise, the CPU-time ones still show the trainer's own
overhead per sample.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "trainer_throughput.json"
HIDDEN = [1024, 1024, 1024]
BATCH = 256
NPROC = 2


def _spec(strategy: str, steps: int) -> dict[str, Any]:
    return {
        "strategy": {"type": strategy, "backend": "gloo"},
        "roles": {"worker": {"replicas": NPROC}},
        "trainer": {
            "model": {"type": "MLP", "hiddenSizes": HIDDEN},
            "optimizer": {"type": "SGD", "lr": 0.05, "momentum": 0.9},
            "batchSize": BATCH,
            "steps": steps,
            "precision": "fp32",
            "logEverySteps": 50,
        },
        "checkpoint": {"everySteps": 10 * steps},
    }


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO / "trainer_image"), str(REPO / "api"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["OMP_NUM_THREADS"] = "1"
    return env


def trainer_rate(
    strategy: str, steps: int, workdir: Path, extra: list[str] | None = None
) -> dict[str, Any]:
    """Run the trainer through `launch`; samples/s from its own step timing."""
    spec_file, result = workdir / f"{strategy}.json", workdir / f"{strategy}-result.pt"
    ckpt = workdir / f"{strategy}-{time.monotonic_ns()}"
    spec_file.write_text(json.dumps(_spec(strategy, steps)))
    cmd = [sys.executable, "-m", "dtjob_trainer", "launch", "--checkpoint-dir", str(ckpt)]
    cmd += ["--result-file", str(result), *(extra or []), str(spec_file)]
    proc = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"trainer failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    out = torch.load(result, weights_only=False)
    return {
        "samples_per_second": steps * BATCH / out["train_seconds"],
        "samples_per_cpu_second": steps * BATCH / out["train_cpu_seconds"],
    }


def _plain_worker(rank: int, strategy: str, steps: int, port: int, queue: Any) -> None:
    """The plain script: what a user would write by hand with DDP or fully_shard."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=NPROC)
    from sklearn.datasets import load_digits

    x_all, y_all = load_digits(return_X_y=True)
    x_all = torch.tensor(x_all / 16.0, dtype=torch.float32)
    y_all = torch.tensor(y_all)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    width = 64
    for h in HIDDEN:
        layers.append(nn.Sequential(nn.Linear(width, h), nn.ReLU()))
        width = h
    layers.append(nn.Linear(width, 10))
    model: nn.Module = nn.Sequential(*layers)
    if strategy == "DataParallel":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for block in model:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    per_rank = BATCH // NPROC
    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(len(y_all), generator=gen)
    start, cpu_start = time.perf_counter(), time.process_time()
    pos = 0
    for _ in range(steps):
        if pos + BATCH > len(order):
            order, pos = torch.randperm(len(y_all), generator=gen), 0
        idx = order[pos + rank * per_rank : pos + (rank + 1) * per_rank]
        pos += BATCH
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
        loss.backward()
        opt.step()
    dist.barrier()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if rank == 0:
        queue.put((steps * BATCH / elapsed, steps * BATCH / cpu))
    dist.destroy_process_group()


def plain_rate(strategy: str, steps: int) -> dict[str, float]:
    """samples/s (wall and per CPU-second of rank 0) of the plain script."""
    from dtjob_trainer.launch import free_port

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    os.environ["OMP_NUM_THREADS"] = "1"
    mp.start_processes(
        _plain_worker,
        args=(strategy, steps, free_port(), queue),
        nprocs=NPROC,
        start_method="spawn",
    )
    wall, cpu = queue.get()
    return {"samples_per_second": float(wall), "samples_per_cpu_second": float(cpu)}


def offload_memory(workdir: Path) -> dict[str, Any]:
    """Peak GPU memory of FSDP vs CPUOffload on one GPU with a GPT (CUDA only)."""
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA"}
    spec = {
        "roles": {"worker": {"replicas": 1, "gpus": 1}},
        "trainer": {
            "model": {
                "type": "GPT",
                "layers": 8,
                "dModel": 1024,
                "heads": 16,
                "seqLen": 256,
                "vocabSize": 8192,
            },
            "dataset": {"type": "SyntheticTokens", "samples": 512},
            "optimizer": {"type": "Adam", "lr": 1e-4},
            "batchSize": 8,
            "steps": 10,
            "logEverySteps": 5,
        },
        "checkpoint": {"everySteps": 1000},
    }
    peaks: dict[str, Any] = {}
    for strategy in ("FSDP", "CPUOffload"):
        spec_file, result = workdir / f"gpu-{strategy}.json", workdir / f"gpu-{strategy}.pt"
        spec_file.write_text(json.dumps({**spec, "strategy": {"type": strategy}}))
        cmd = [
            sys.executable,
            "-m",
            "dtjob_trainer",
            "launch",
            "--checkpoint-dir",
            str(workdir / f"gpu-{strategy}-ckpt"),
            "--result-file",
            str(result),
            str(spec_file),
        ]
        proc = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{strategy} failed:\n{proc.stdout}{proc.stderr}")
        out = torch.load(result, weights_only=False)
        peaks[strategy] = {
            "peak_device_bytes": out["peak_device_bytes"],
            "samples_per_second": 10 * 8 / out["train_seconds"],
        }
    peaks["offload_vs_fsdp_peak_ratio"] = (
        peaks["CPUOffload"]["peak_device_bytes"] / peaks["FSDP"]["peak_device_bytes"]
    )
    peaks["device"] = torch.cuda.get_device_name(0)
    return peaks


def _compare(ours: list[dict[str, float]], plain: list[dict[str, float]]) -> dict[str, Any]:
    """Best (and median) of each side, wall-clock and per CPU-second (the latter is what
    the trainer adds per sample, independent of other load on a shared host)."""
    out: dict[str, Any] = {"target_ratio": 0.95}
    for key in ("samples_per_second", "samples_per_cpu_second"):
        best_ours, best_plain = max(r[key] for r in ours), max(r[key] for r in plain)
        med_ours = statistics.median(r[key] for r in ours)
        med_plain = statistics.median(r[key] for r in plain)
        out[key] = {
            "trainer": best_ours,
            "plain": best_plain,
            "ratio": best_ours / best_plain,
            "median_ratio": med_ours / med_plain,
            "trainer_runs": [r[key] for r in ours],
            "plain_runs": [r[key] for r in plain],
        }
    return out


def main() -> None:
    """Run the benchmark and write the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    figures: dict[str, Any] = {
        "setup": {
            "processes": NPROC,
            "backend": "gloo",
            "device": "cpu",
            "model": f"MLP 64-{'-'.join(map(str, HIDDEN))}-10 on digits, fp32",
            "global_batch": BATCH,
            "steps": args.steps,
            "repeats": args.repeats,
            "threads_per_process": 1,
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
            "python": platform.python_version(),
        },
        "throughput": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for strategy in ("DataParallel", "FSDP"):
            ours: list[dict[str, float]] = []
            plain: list[dict[str, float]] = []
            for _ in range(args.repeats):
                ours.append(trainer_rate(strategy, args.steps, work))
                plain.append(plain_rate(strategy, args.steps))
            figures["throughput"][strategy] = _compare(ours, plain)
            print(strategy, json.dumps(figures["throughput"][strategy]), flush=True)
        figures["cpu_offload_memory"] = offload_memory(work)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
