"""Pipeline bubble and activation memory of GPipe and 1F1B, and the throughput of the
asynchronous schedules PipeDream and PipeDream2BW at equal micro-batches, measured on CPU
(gloo).

Each of P = 4 ranks holds one stage of torch.distributed.pipelining; a stage is a small
Linear whose forward sleeps T_F and whose backward sleeps 2 T_F. Sleep-dominated stages make
the schedule's timing measurable on a shared 2-core machine (sleeping ranks overlap even
when computing ones could not). Per configuration (schedule, M micro-batches):

- bubble: 1 - M (T_F + T_B) / step time, the share of a step a rank waits. The theory for
  both schedules is (P - 1) / (M + P - 1); communication and Python overhead add to it.
- activations: on stage 0, the most micro-batches whose forward has run but not their
  backward, and the peak bytes of tensors saved for backward (saved-tensor hooks whose
  handles are released when autograd frees them). GPipe keeps all M, 1F1B at most P.
- PipeDream / PipeDream2BW run on the trainer's own driver (dtjob_trainer.strategies.
  pipedream_stage) with the same stages and an SGD step per update: samples/s against
  GPipe and 1F1B at the same M. They drain at every step boundary like 1F1B, so the
  bubble is 1F1B's; the figures show what weight stashing and the extra updates cost.

    PYTHONPATH=trainer_image:api python bench/pipeline_bubble.py [--steps 3] [--tf 0.02]

Writes bench/results/pipeline_bubble.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from dtjob_api.spec import PipelineSchedule
from dtjob_trainer.strategies.pipedream import step_actions
from dtjob_trainer.strategies.pipedream_stage import PipeDreamStage

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "pipeline_bubble.json"
STAGES = 4
WIDTH = 256
MICROBATCH = 32
CONFIGS = [("GPipe", m) for m in (1, 2, 4, 8, 16)] + [("1F1B", m) for m in (4, 8, 16)]
ASYNC = ("PipeDream", "PipeDream2BW")
CONFIGS += [(name, m) for name in ASYNC for m in (4, 8, 16)]


class Tracker:
    """Live micro-batches and saved-for-backward bytes of this rank, with their peaks."""

    def __init__(self) -> None:
        self.live = self.peak_live = 0
        self.saved = self.peak_saved = 0
        self.parameters: set[int] = set()

    def reset(self, module: nn.Module) -> None:
        self.live = self.peak_live = self.saved = self.peak_saved = 0
        self.parameters = {p.data_ptr() for p in module.parameters()}

    def pack(self, t: torch.Tensor) -> Any:
        holder = _Saved(t)
        if t.data_ptr() in self.parameters:  # weights saved for backward are not activations
            return holder
        self.saved += t.nbytes
        self.peak_saved = max(self.peak_saved, self.saved)
        weakref.finalize(holder, self._release, t.nbytes)
        return holder

    def _release(self, nbytes: int) -> None:
        self.saved -= nbytes


class _Saved:
    """Holds one tensor saved for backward; its finalizer tells the tracker it is freed."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


TRACK = Tracker()


class _Sleep(torch.autograd.Function):
    """Identity that sleeps T_F forward and 2 T_F backward, and counts live micro-batches."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tf: float) -> torch.Tensor:
        ctx.tf = tf
        TRACK.live += 1
        TRACK.peak_live = max(TRACK.peak_live, TRACK.live)
        time.sleep(tf)
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        time.sleep(2 * ctx.tf)
        TRACK.live -= 1
        return grad, None


class SleepStage(nn.Module):
    """One pipeline stage: Linear + ReLU (real saved activations), then the sleep."""

    def __init__(self, tf: float) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)
        self.tf = tf

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Sleep.apply(torch.relu(self.linear(x)), self.tf)


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


StepFn = Any  # (step, x, y) -> None


def _sync_step(module: nn.Module, rank: int, name: str, m: int) -> StepFn:
    stage = PipelineStage(module, rank, STAGES, torch.device("cpu"))
    kind = ScheduleGPipe if name == "GPipe" else Schedule1F1B
    schedule = kind(stage, m, loss_fn=_loss)

    def run(step: int, x: torch.Tensor, y: torch.Tensor) -> None:
        if rank == 0:
            schedule.step(x)
        elif rank == STAGES - 1:
            schedule.step(target=y)
        else:
            schedule.step()

    return run


def _async_step(module: nn.Module, rank: int, name: str, m: int) -> StepFn:
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-4)
    driver = PipeDreamStage(module, rank, STAGES, torch.device("cpu"), _loss, optimizer.step)
    schedule = PipelineSchedule(name)

    def run(step: int, x: torch.Tensor, y: torch.Tensor) -> None:
        driver.run(step_actions(schedule, STAGES, rank, m, step), x, y, m)

    return run


def _rank(rank: int, port: int, steps: int, tf: float, queue: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=STAGES)
    torch.manual_seed(rank)
    rows = []
    for schedule_name, m in CONFIGS:
        module = SleepStage(tf)
        run_step = (
            _async_step(module, rank, schedule_name, m)
            if schedule_name in ASYNC
            else (_sync_step(module, rank, schedule_name, m))
        )
        x = torch.randn(m * MICROBATCH, WIDTH)
        y = torch.randn(m * MICROBATCH, WIDTH)
        times = []
        for i in range(steps + 1):  # the first step builds buffers: not timed
            TRACK.reset(module)
            dist.barrier()
            start = time.perf_counter()
            with torch.autograd.graph.saved_tensors_hooks(TRACK.pack, lambda h: h.t):
                run_step(i, x, y)
            elapsed = time.perf_counter() - start
            if i:
                times.append(elapsed)
        rows.append(
            {
                "schedule": schedule_name,
                "microbatches": m,
                "step_seconds": statistics.median(times),
                "peak_live_microbatches": TRACK.peak_live,
                "peak_saved_bytes": TRACK.peak_saved,
            }
        )
    queue.put((rank, rows))
    dist.barrier()
    dist.destroy_process_group()


def measure(steps: int, tf: float) -> dict[str, Any]:
    """Run every configuration on 4 ranks; combine the ranks' figures."""
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_rank, args=(r, port, steps, tf, queue)) for r in range(STAGES)]
    for p in procs:
        p.start()
    by_rank = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    busy = 3 * tf  # forward + backward per micro-batch per stage
    out = []
    for i, (schedule_name, m) in enumerate(CONFIGS):
        step = max(by_rank[r][i]["step_seconds"] for r in range(STAGES))
        stage0 = by_rank[0][i]
        out.append(
            {
                "schedule": schedule_name,
                "microbatches": m,
                "step_seconds": round(step, 4),
                "ideal_seconds_without_bubble": round(m * busy, 4),
                "bubble_measured": round(1 - m * busy / step, 4),
                "bubble_theory": round((STAGES - 1) / (m + STAGES - 1), 4),
                "stage0_peak_live_microbatches": stage0["peak_live_microbatches"],
                "stage0_peak_saved_activation_bytes": stage0["peak_saved_bytes"],
            }
        )
    return {"configs": out}


def _throughput(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Samples/s of every schedule at each M the asynchronous ones ran."""
    rate = {
        (r["schedule"], r["microbatches"]): round(
            r["microbatches"] * MICROBATCH / r["step_seconds"], 1
        )
        for r in rows
    }
    names = ("GPipe", "1F1B", *ASYNC)
    return [
        {"microbatches": m, **{f"{name}_samples_per_s": rate[(name, m)] for name in names}}
        for m in (4, 8, 16)
        if all((name, m) in rate for name in names)
    ]


def main() -> None:
    """Measure, print a summary, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per configuration")
    parser.add_argument("--tf", type=float, default=0.02, help="forward sleep per stage (s)")
    args = parser.parse_args()
    load = os.getloadavg()
    figures = measure(args.steps, args.tf)
    rows = figures["configs"]
    gpipe = {
        r["microbatches"]: r["stage0_peak_saved_activation_bytes"]
        for r in rows
        if r["schedule"] == "GPipe"
    }
    memory = [
        {
            "microbatches": r["microbatches"],
            "gpipe_peak_saved_bytes": gpipe[r["microbatches"]],
            "1f1b_peak_saved_bytes": r["stage0_peak_saved_activation_bytes"],
            "1f1b_lower": r["stage0_peak_saved_activation_bytes"] < gpipe[r["microbatches"]],
        }
        for r in rows
        if r["schedule"] == "1F1B"
    ]
    result = {
        "setup": {
            "stages": STAGES,
            "stage": f"Linear {WIDTH}x{WIDTH} + ReLU, forward sleep {args.tf}s, backward "
            f"sleep {2 * args.tf}s",
            "microbatch_rows": MICROBATCH,
            "timed_steps": args.steps,
            "backend": "gloo",
            "device": "cpu",
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "load_average_at_start": list(load),
            "python": platform.python_version(),
        },
        **figures,
        "activation_memory_1f1b_vs_gpipe": memory,
        "async_throughput_vs_sync": _throughput(rows),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{'schedule':<12} {'M':>3} {'step s':>8} {'bubble':>7} {'theory':>7} "
        f"{'live':>5} {'saved KiB':>10}"
    )
    for r in rows:
        print(
            f"{r['schedule']:<12} {r['microbatches']:>3} {r['step_seconds']:>8.3f} "
            f"{r['bubble_measured']:>7.3f} {r['bubble_theory']:>7.3f} "
            f"{r['stage0_peak_live_microbatches']:>5} "
            f"{r['stage0_peak_saved_activation_bytes'] / 1024:>10.0f}"
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
