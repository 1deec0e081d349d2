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
SIZES = {"350M": (24, 1024, 16, 16), "760M": (24, 1536, 16, 8), "1.3B": (24, 2048, 16, 8),
         # The rehearsal's (CPU, no GPU): the same code on a model of a few seconds.
         "tiny": (2, 64, 4, 4)}  # fmt: skip
# (seqLen, vocabSize) by size: GPT-2's tokenizer's vocabulary rounded up to a multiple of 64.
SHAPES = {name: (SEQ, VOCAB) for name in SIZES} | {"tiny": (32, 512)}
# d_model of the capped-memory search (24 layers each), smallest first.
CAPPED_WIDTHS = (512, 768, 1024, 1536, 2048, 2560, 3072, 4096)
# Dense bf16 peak of the GPUs this is likely to meet (TFLOPS), by a name fragment.
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "L4": 121.0}
CHILD_TIMEOUT = 1200
# A child started with less than this left of the budget could not even build its model.
MIN_CHILD_SECONDS = 15.0


def gpt_spec(
    layers: int, d_model: int, heads: int, batch: int, shape: tuple[int, int] = (SEQ, VOCAB)
) -> dict[str, Any]:
    """A one-worker DataParallel job over the bundled GPT on synthetic tokens."""
    seq, vocab = shape
    return {
        "strategy": {"type": "DataParallel"},
        "roles": {"worker": {"replicas": 1, "gpus": 1}},
        "trainer": {
            "model": {
                "type": "GPT",
                "layers": layers,
                "dModel": d_model,
                "heads": heads,
                "seqLen": seq,
                "vocabSize": vocab,
            },
            "dataset": {"type": "SyntheticTokens", "samples": 512, "evalSamples": 256},
            "optimizer": {"type": "AdamW", "lr": 1e-4},
            "batchSize": batch,
            "precision": "bf16",
        },
    }


def flops_per_token(params: int, layers: int, d_model: int, seq: int = SEQ) -> float:
    """Training FLOPs per token: 6N for the weights plus 12 L d s for attention (PaLM,
    appendix B)."""
    return 6.0 * params + 12.0 * layers * d_model * seq


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


def _tokens(
    batch: int, device: torch.device, shape: tuple[int, int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    seq, vocab = shape or ((SEQ, VOCAB) if device.type == "cuda" else SHAPES["tiny"])
    x = torch.randint(0, vocab, (batch, seq), device=device)
    return x, torch.roll(x, -1, dims=1)


def _device() -> torch.device:
    """The GPU, or the CPU when there is none (the rehearsal, with tiny models)."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _train_steps(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    batch: int,
    steps: int,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> float:
    """Seconds per step of `steps` bf16 steps, after synchronising the device. Inputs go
    to the GPU even when the parameters live in host memory (CPUOffload)."""
    from dtjob_trainer.models import loss_fn

    loss = loss or loss_fn
    device = _device()
    x, y = _tokens(batch, device)
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            value = loss(model(x), y)
        torch.autograd.backward(value)
        opt.step()
    _sync(device)
    return (time.perf_counter() - start) / steps


def _variant_options(args: list[str]) -> dict[str, Any]:
    """`key=value` words of a child's command line (compile=1 batch=32 ...) as a dict."""
    opts: dict[str, Any] = {}
    for word in args:
        key, _, value = word.partition("=")
        opts[key] = int(value) if value.isdigit() else value
    return opts


def _speed_setup(
    model: torch.nn.Module, opts: dict[str, Any]
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The trainer's own speed options on `model`, as `trainer.compile` and
    `trainer.activationCheckpointing` apply them (dtjob_trainer.speed), and the loss the
    trainer computes with them. The rehearsal compiles with aot_eager: dynamo and
    AOTAutograd run as on the GPU, without a C compiler's minutes on a 2-core machine."""
    from dtjob_trainer.speed import apply_block_options, training_loss

    backend = "inductor" if torch.cuda.is_available() else "aot_eager"
    compiled = bool(opts.get("compile"))
    assert isinstance(model, torch.nn.Sequential)
    apply_block_options(model, bool(opts.get("ckpt")), compiled, backend=backend)
    return training_loss(compiled and bool(opts.get("loss", 1)), backend=backend)


def one_throughput(name: str, steps: int, *variant: str) -> dict[str, Any]:
    """Tokens/s and MFU of one GPT size (after warm-up steps: 3 eager, 5 compiled, which
    covers the compilation of the forward and the backward). A variant (`compile=1`,
    `loss=0` to leave the loss eager, `ckpt=1`, `batch=N`) runs the trainer's speed
    options."""
    from dtjob_api.spec import OptimizerSpec
    from dtjob_trainer.optim import build_optimizer
    from dtjob_trainer.speed import enable_tf32

    opts = _variant_options(list(variant))
    layers, d_model, heads, batch = SIZES[name]
    batch = int(opts.get("batch", batch))
    device = _device()
    enable_tf32(device)
    model = _model(gpt_spec(layers, d_model, heads, batch, SHAPES[name]), device)
    params = sum(p.numel() for p in model.parameters())
    loss = _speed_setup(model, opts)
    opt = build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))
    seq, vocab = SHAPES[name]
    compile_start = time.perf_counter()
    _train_steps(model, opt, batch, 5 if opts.get("compile") else 3, loss)
    warmup = time.perf_counter() - compile_start
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = _train_steps(model, opt, batch, steps, loss)
    tokens = batch * seq / seconds
    per_token = flops_per_token(params, layers, d_model, seq)
    achieved = tokens * per_token / 1e12
    # The input embedding is a lookup, no matmul: MFU counted without its parameters too.
    lookup = (vocab + seq) * d_model
    achieved_no_lookup = tokens * (per_token - 6.0 * lookup) / 1e12
    peak = peak_tflops(torch.cuda.get_device_name(0)) if device.type == "cuda" else None
    return {
        "model": name,
        "variant": opts,
        "parameters": params,
        "batch": batch,
        "seq_len": seq,
        "fused_adamw": bool(opt.defaults.get("fused")),
        "warmup_seconds": round(warmup, 1),
        "seconds_per_step": round(seconds, 4),
        "tokens_per_second": round(tokens),
        "achieved_tflops": round(achieved, 1),
        "mfu": round(achieved / peak, 3) if peak else None,
        "mfu_without_embedding_lookup": round(achieved_no_lookup / peak, 3) if peak else None,
        "peak_tflops_assumed": peak,
        "peak_memory_gib": _peak_gib(device),
    }


def _peak_gib(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2)


def one_profile(name: str) -> dict[str, Any]:
    """Where a step of one GPT size goes, eager: the CUDA kernels that take the most time
    over 3 profiled steps (after 3 warm-up steps), by kernel name, and their share. What
    bounds the small models is read here, not guessed."""
    from torch.profiler import ProfilerActivity, profile

    from dtjob_api.spec import OptimizerSpec
    from dtjob_trainer.optim import build_optimizer
    from dtjob_trainer.speed import enable_tf32

    layers, d_model, heads, batch = SIZES[name]
    device = _device()
    enable_tf32(device)
    model = _model(gpt_spec(layers, d_model, heads, batch, SHAPES[name]), device)
    opt = build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))
    _train_steps(model, opt, batch, 3)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        wall = _train_steps(model, opt, batch, 3)
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, attr, 0) > 0]
    if device.type == "cuda":
        events = [e for e in events if e.device_type.name == "CUDA"]
    total = sum(getattr(e, attr) for e in events) or 1.0
    top = sorted(events, key=lambda e: getattr(e, attr), reverse=True)[:20]
    return {
        "model": name,
        "batch": batch,
        "wall_seconds_per_step": round(wall, 4),
        "device_seconds_per_step": round(total / 3 / 1e6, 4),
        "top_kernels": [
            {
                "name": e.key[:120],
                "share": round(getattr(e, attr) / total, 3),
                "calls_per_step": e.count // 3,
            }
            for e in top
        ],
    }


def _init_on_device(model: torch.nn.Module, device: torch.device) -> None:
    """Allocate a meta model on `device` and give it GPT-like values there (N(0, 0.02)
    matrices, unit norms, zero biases): building a multi-billion-parameter model on the
    CPU first would take minutes of the window."""
    model.to_empty(device=device)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            elif name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()


def one_bigger(layers: int, d_model: int, heads: int, batch: int, *variant: str) -> dict[str, Any]:
    """Tokens/s and MFU of a large GPT on one GPU with the trainer's speed options (by
    default activation checkpointing and compiled blocks): 8 steps after the warm-up.
    The MFU counts 6N + attention, not the recomputation, so checkpointing costs MFU."""
    from dtjob_api.spec import OptimizerSpec
    from dtjob_trainer.config import load_config
    from dtjob_trainer.models import build_model
    from dtjob_trainer.optim import build_optimizer
    from dtjob_trainer.speed import enable_tf32

    opts = {"ckpt": 1, "compile": 1, **_variant_options(list(variant))}
    device = _device()
    enable_tf32(device)
    seq, vocab = (SEQ, VOCAB) if device.type == "cuda" else SHAPES["tiny"]
    model = build_model(load_config(gpt_spec(layers, d_model, heads, batch, (seq, vocab))),
                        torch.float32, meta=True)  # fmt: skip
    _init_on_device(model, device)
    params = sum(p.numel() for p in model.parameters())
    loss = _speed_setup(model, opts)
    opt = build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))
    _train_steps(model, opt, batch, 4, loss)
    seconds = _train_steps(model, opt, batch, 8 if device.type == "cuda" else 2, loss)
    tokens = batch * seq / seconds
    achieved = tokens * flops_per_token(params, layers, d_model, seq) / 1e12
    peak = peak_tflops(torch.cuda.get_device_name(0)) if device.type == "cuda" else None
    return {
        "layers": layers,
        "d_model": d_model,
        "batch": batch,
        "variant": opts,
        "parameters": params,
        "seconds_per_step": round(seconds, 3),
        "tokens_per_second": round(tokens),
        "achieved_tflops": round(achieved, 1),
        "mfu": round(achieved / peak, 3) if peak else None,
        "peak_memory_gib": _peak_gib(device),
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
        for variant in LATER:
            record["throughput_bf16_compiled"].append(child(budget, "throughput", *variant))
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
