"""GPU figures of the bundled trainer's GPT on one GPU (bench/results/gpu.json):

1. throughput and MFU of bf16 training (autocast, fused AdamW, TF32) for GPT-3's 350M,
   760M and 1.3B shapes at sequence length 1024;
2. the largest GPT that trains one step under a capped GPU memory
   (`torch.cuda.set_per_process_memory_fraction`), plain PyTorch (everything on the GPU)
   against CPUOffload (FSDP2 with CPUOffloadPolicy, as the trainer runs it);
3. the peak GPU memory of the trainer's evaluation (chunked logits) against the logits of
   the whole evaluation set at once.

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

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "gpu.json"
SEQ, VOCAB = 1024, 50304
# GPT-3's shapes (Brown et al. 2020, table 2.1): name -> (layers, d_model, heads, batch).
# The bundled GPT's embedding and head are untied, so they hold 406M, 836M and 1.42B
# parameters; the record gives the real count, which the MFU uses.
SIZES = {"350M": (24, 1024, 16, 16), "760M": (24, 1536, 16, 8), "1.3B": (24, 2048, 16, 8)}
# d_model of the capped-memory search (24 layers each), smallest first.
CAPPED_WIDTHS = (512, 768, 1024, 1536, 2048, 2560, 3072, 4096)
# Dense bf16 peak of the GPUs this is likely to meet (TFLOPS), by a name fragment.
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "L4": 121.0}
CHILD_TIMEOUT = 1200
# A child started with less than this left of the budget could not even build its model.
MIN_CHILD_SECONDS = 15.0


def gpt_spec(layers: int, d_model: int, heads: int, batch: int) -> dict[str, Any]:
    """A one-worker DataParallel job over the bundled GPT on synthetic tokens."""
    return {
        "strategy": {"type": "DataParallel"},
        "roles": {"worker": {"replicas": 1, "gpus": 1}},
        "trainer": {
            "model": {
                "type": "GPT",
                "layers": layers,
                "dModel": d_model,
                "heads": heads,
                "seqLen": SEQ,
                "vocabSize": VOCAB,
            },
            "dataset": {"type": "SyntheticTokens", "samples": 512, "evalSamples": 256},
            "optimizer": {"type": "AdamW", "lr": 1e-4},
            "batchSize": batch,
            "precision": "bf16",
        },
    }


def flops_per_token(params: int, layers: int, d_model: int) -> float:
    """Training FLOPs per token: 6N for the weights plus 12 L d s for attention (PaLM,
    appendix B)."""
    return 6.0 * params + 12.0 * layers * d_model * SEQ


def peak_tflops(device_name: str) -> float | None:
    """Dense bf16 peak of a GPU by its name, None for one not in the table."""
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in device_name), None)


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


# --- measurements, one per child process ------------------------------------------------


def _model(spec: dict[str, Any], device: torch.device) -> torch.nn.Module:
    from dtjob_trainer.config import load_config
    from dtjob_trainer.models import build_model

    return build_model(load_config(spec), torch.float32).to(device)


def _tokens(batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(0, VOCAB, (batch, SEQ), device=device)
    return x, torch.roll(x, -1, dims=1)


def _train_steps(
    model: torch.nn.Module, opt: torch.optim.Optimizer, batch: int, steps: int
) -> float:
    """Seconds per step of `steps` bf16 steps, after synchronising the device. Inputs go
    to the GPU even when the parameters live in host memory (CPUOffload)."""
    from dtjob_trainer.models import loss_fn

    x, y = _tokens(batch, torch.device("cuda", torch.cuda.current_device()))
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        torch.autograd.backward(loss)
        opt.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def one_throughput(name: str, steps: int) -> dict[str, Any]:
    """Tokens/s and MFU of one GPT size (after 3 warm-up steps)."""
    from dtjob_api.spec import OptimizerSpec
    from dtjob_trainer.optim import build_optimizer
    from dtjob_trainer.speed import enable_tf32

    layers, d_model, heads, batch = SIZES[name]
    device = torch.device("cuda", 0)
    enable_tf32(device)
    model = _model(gpt_spec(layers, d_model, heads, batch), device)
    params = sum(p.numel() for p in model.parameters())
    opt = build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))
    _train_steps(model, opt, batch, 3)
    torch.cuda.reset_peak_memory_stats()
    seconds = _train_steps(model, opt, batch, steps)
    tokens = batch * SEQ / seconds
    achieved = tokens * flops_per_token(params, layers, d_model) / 1e12
    peak = peak_tflops(torch.cuda.get_device_name(0))
    return {
        "model": name,
        "parameters": params,
        "batch": batch,
        "seq_len": SEQ,
        "fused_adamw": bool(opt.defaults.get("fused")),
        "seconds_per_step": round(seconds, 4),
        "tokens_per_second": round(tokens),
        "achieved_tflops": round(achieved, 1),
        "mfu": round(achieved / peak, 3) if peak else None,
        "peak_tflops_assumed": peak,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }


def one_capped(mode: str, d_model: int, fraction: float) -> dict[str, Any]:
    """Two training steps of a 24-layer GPT of width `d_model` (batch 1) under the memory
    cap, plain or with CPUOffload; raises (the child fails) when it does not fit."""
    from dtjob_api.spec import OptimizerSpec, Precision
    from dtjob_trainer.optim import build_optimizer

    device = torch.device("cuda", 0)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    spec = gpt_spec(24, d_model, max(1, d_model // 128), 1)
    if mode == "plain":
        model = _model(spec, device)
    else:
        import torch.distributed as dist
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        from dtjob_trainer.config import load_config
        from dtjob_trainer.meta_init import materialize_sharded
        from dtjob_trainer.models import build_model
        from dtjob_trainer.strategies.fsdp import mixed_precision

        torch.cuda.set_device(device)
        from dtjob_trainer.launch import free_port

        address = f"tcp://127.0.0.1:{free_port()}"
        dist.init_process_group("nccl", init_method=address, rank=0, world_size=1)
        cfg = load_config(spec)
        model = build_model(cfg, torch.float32, meta=True)
        policy, offload = mixed_precision(Precision.BF16), CPUOffloadPolicy()
        for block in model:
            fully_shard(block, offload_policy=offload, mp_policy=policy)
        fully_shard(model, offload_policy=offload, mp_policy=policy)
        materialize_sharded(model, cfg, torch.float32, torch.device("cpu"))
    params = sum(p.numel() for p in model.parameters())
    opt = build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))
    seconds = _train_steps(model, opt, 1, 2)
    return {
        "mode": mode,
        "d_model": d_model,
        "parameters": params,
        "seconds_per_step": round(seconds, 3),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }


def one_evaluation() -> dict[str, Any]:
    """Peak GPU memory of the trainer's evaluation of the 350M GPT, against its weights and
    the bf16 logits of the whole evaluation set."""
    from dtjob_trainer.config import load_config
    from dtjob_trainer.data import load_dataset
    from dtjob_trainer.evaluate import accuracy

    layers, d_model, heads, _ = SIZES["350M"]
    spec = gpt_spec(layers, d_model, heads, 8)
    device = torch.device("cuda", 0)
    model = _model(spec, device)
    data = load_dataset(load_config(spec), torch.float32)
    limit = spec["trainer"]["dataset"]["evalSamples"]
    weights = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    accuracy(model, data, device, limit)
    peak = torch.cuda.max_memory_allocated()
    rows = min(limit, data.x_test.shape[0])
    return {
        "model": "350M",
        "eval_samples": rows,
        "weights_gib": round(weights / 2**30, 2),
        "peak_gib": round(peak / 2**30, 2),
        "peak_above_weights_gib": round((peak - weights) / 2**30, 2),
        "all_logits_at_once_gib": round(rows * SEQ * VOCAB * 2 / 2**30, 2),
    }


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


def measure(record: dict[str, Any], args: argparse.Namespace, write: Callable[[], None]) -> None:
    """Every measurement, cheapest first, writing the record after each."""
    budget = Budget(args.budget)
    record["budget_seconds"] = args.budget
    record["evaluation"] = child(budget, "evaluation")
    write()
    record["throughput_bf16"] = []
    for name in SIZES:
        record["throughput_bf16"].append(child(budget, "throughput", name))
        write()
    memory = torch.cuda.get_device_properties(0).total_memory
    capped: dict[str, Any] = {
        "fraction": args.fraction,
        "cap_gib": round(args.fraction * memory / 2**30, 1),
    }
    record["capped_memory"] = capped
    capped["plain"] = largest("plain", args.fraction, budget, top_first=False)
    write()
    capped["cpu_offload"] = largest("cpu_offload", args.fraction, budget, top_first=True)
    plain, offload = capped["plain"]["largest"], capped["cpu_offload"]["largest"]
    if plain and offload:
        capped["offload_to_plain_parameters"] = round(
            offload["parameters"] / plain["parameters"], 2
        )
    record["seconds"] = round(args.budget - budget.left(), 1)
    write()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.25)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds for all")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, *rest = args.one
        if kind == "throughput":
            out = one_throughput(rest[0], args.steps)
        elif kind == "capped":
            out = one_capped(rest[0], int(rest[1]), float(rest[2]))
        else:
            out = one_evaluation()
        print(json.dumps(out))
        return
    record: dict[str, Any] = {"machine": machine(), "date": time.strftime("%Y-%m-%d")}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.replace(args.out)

    if not torch.cuda.is_available():
        record["skipped"] = "no CUDA device visible to torch"
    else:
        measure(record, args, write)
    write()
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
