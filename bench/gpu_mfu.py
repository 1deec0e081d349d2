"""Speed of the bundled trainer's GPT on one GPU, measured for bench/gpu.py:

- `one_throughput`: tokens/s and MFU of bf16 training (autocast, fused AdamW, TF32) for
  GPT-3's 350M, 760M and 1.3B shapes at sequence length 1024, eager or with the trainer's
  speed options (`trainer.compile`, activation checkpointing, a larger batch);
- `one_profile`: where an eager step's time goes, the CUDA kernels that take the most;
- `one_bigger`: tokens/s and MFU of a large GPT (32 layers, up to 4096 wide) with
  activation checkpointing and compiled blocks, of which bench/gpu.py keeps the widest
  at >= 40 % MFU.

Each `one_*` function is one measurement: bench/gpu.py runs it in a child process of its
own (`--one ...`), which prints what it returns as JSON. The GPT shapes, the FLOPs count
and the training steps are here too, and bench/gpu_memory.py's measurements use them.
Like bench/gpu.py, this module imports only the standard library and torch at its top
level (the GPU machine's image has nothing else); the trainer's packages, on the
PYTHONPATH bench/gpu.py gives its children, are imported inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

SEQ, VOCAB = 1024, 50304
# GPT-3's shapes (Brown et al. 2020, table 2.1): name -> (layers, d_model, heads, batch).
# The bundled GPT's embedding and head are untied, so they hold 406M, 836M and 1.42B
# parameters; the record gives the real count, which the MFU uses.
SIZES = {"350M": (24, 1024, 16, 16), "760M": (24, 1536, 16, 8), "1.3B": (24, 2048, 16, 8),
         # The rehearsal's (CPU, no GPU): the same code on a model of a few seconds.
         "tiny": (2, 64, 4, 4)}  # fmt: skip
# (seqLen, vocabSize) by size: GPT-2's tokenizer's vocabulary rounded up to a multiple of 64.
SHAPES = {name: (SEQ, VOCAB) for name in SIZES} | {"tiny": (32, 512)}
# Dense bf16 peak of the GPUs this is likely to meet (TFLOPS), by a name fragment.
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "L4": 121.0}


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


# --- measurements, one per child process ------------------------------------------------


def model_on(spec: dict[str, Any], device: torch.device) -> torch.nn.Module:
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


def timed_steps(
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


def _training(
    model: torch.nn.Module, opts: dict[str, Any]
) -> tuple[int, Callable[[torch.Tensor, torch.Tensor], torch.Tensor], torch.optim.Optimizer]:
    """`model`'s parameter count, its loss with the trainer's speed options, and the
    trainer's AdamW over it: what every throughput measure times."""
    from dtjob_api.spec import OptimizerSpec
    from dtjob_trainer.optim import build_optimizer

    params = sum(p.numel() for p in model.parameters())
    loss = _speed_setup(model, opts)
    return params, loss, build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))


def _device_peak(device: torch.device) -> float | None:
    """The GPU's assumed dense bf16 peak, TFLOP/s (None off CUDA or for an unknown GPU)."""
    return peak_tflops(torch.cuda.get_device_name(0)) if device.type == "cuda" else None


def _mfu(achieved: float, peak: float | None) -> float | None:
    return round(achieved / peak, 3) if peak else None


def one_throughput(name: str, steps: int, *variant: str) -> dict[str, Any]:
    """Tokens/s and MFU of one GPT size (after warm-up steps: 3 eager, 5 compiled, which
    covers the compilation of the forward and the backward). A variant (`compile=1`,
    `loss=0` to leave the loss eager, `ckpt=1`, `batch=N`) runs the trainer's speed
    options."""
    from dtjob_trainer.speed import enable_tf32

    opts = _variant_options(list(variant))
    layers, d_model, heads, batch = SIZES[name]
    batch = int(opts.get("batch", batch))
    device = _device()
    enable_tf32(device)
    model = model_on(gpt_spec(layers, d_model, heads, batch, SHAPES[name]), device)
    params, loss, opt = _training(model, opts)
    seq, vocab = SHAPES[name]
    compile_start = time.perf_counter()
    timed_steps(model, opt, batch, 5 if opts.get("compile") else 3, loss)
    warmup = time.perf_counter() - compile_start
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = timed_steps(model, opt, batch, steps, loss)
    tokens = batch * seq / seconds
    per_token = flops_per_token(params, layers, d_model, seq)
    achieved = tokens * per_token / 1e12
    # The input embedding is a lookup, no matmul: MFU counted without its parameters too.
    lookup = (vocab + seq) * d_model
    achieved_no_lookup = tokens * (per_token - 6.0 * lookup) / 1e12
    peak = _device_peak(device)
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
        "mfu": _mfu(achieved, peak),
        "mfu_without_embedding_lookup": _mfu(achieved_no_lookup, peak),
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
    model = model_on(gpt_spec(layers, d_model, heads, batch, SHAPES[name]), device)
    opt = build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))
    timed_steps(model, opt, batch, 3)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        wall = timed_steps(model, opt, batch, 3)
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
    from dtjob_trainer.config import load_config
    from dtjob_trainer.models import build_model
    from dtjob_trainer.speed import enable_tf32

    opts = {"ckpt": 1, "compile": 1, **_variant_options(list(variant))}
    device = _device()
    enable_tf32(device)
    seq, vocab = (SEQ, VOCAB) if device.type == "cuda" else SHAPES["tiny"]
    model = build_model(load_config(gpt_spec(layers, d_model, heads, batch, (seq, vocab))),
                        torch.float32, meta=True)  # fmt: skip
    _init_on_device(model, device)
    params, loss, opt = _training(model, opts)
    timed_steps(model, opt, batch, 4, loss)
    seconds = timed_steps(model, opt, batch, 8 if device.type == "cuda" else 2, loss)
    tokens = batch * seq / seconds
    achieved = tokens * flops_per_token(params, layers, d_model, seq) / 1e12
    peak = _device_peak(device)
    return {
        "layers": layers,
        "d_model": d_model,
        "batch": batch,
        "variant": opts,
        "parameters": params,
        "seconds_per_step": round(seconds, 3),
        "tokens_per_second": round(tokens),
        "achieved_tflops": round(achieved, 1),
        "mfu": _mfu(achieved, peak),
        "peak_memory_gib": _peak_gib(device),
    }
