"""GPU memory of the bundled trainer's GPT on one GPU, measured for bench/gpu.py:

- `one_capped`: whether a 24-layer GPT of a given width trains under a capped GPU memory
  (`torch.cuda.set_per_process_memory_fraction`), plain PyTorch (everything on the GPU)
  or CPUOffload (FSDP2 with CPUOffloadPolicy, as the trainer runs it); bench/gpu.py
  searches the widths for the largest that fits;
- `one_evaluation`: the peak GPU memory of the trainer's evaluation (chunked logits)
  against the logits of the whole evaluation set at once.

Each is one measurement: bench/gpu.py runs it in a child process of its own (`--one
capped ...`, `--one evaluation`), which prints what it returns as JSON, so a width that
does not fit fails that child only. The GPT shapes and the training steps are
bench/gpu_mfu.py's. Like it, this module imports only the standard library and torch at
its top level; the trainer's packages are imported inside the functions.
"""

from __future__ import annotations

from typing import Any

import torch
from gpu_mfu import SEQ, SIZES, VOCAB, gpt_spec, model_on, timed_steps


def one_capped(mode: str, d_model: int, fraction: float) -> dict[str, Any]:
    """Two training steps of a 24-layer GPT of width `d_model` (batch 1) under the memory
    cap, plain or with CPUOffload; raises (the child fails) when it does not fit."""
    from dtjob_api.spec import OptimizerSpec, Precision
    from dtjob_trainer.optim import build_optimizer

    device = torch.device("cuda", 0)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    spec = gpt_spec(24, d_model, max(1, d_model // 128), 1)
    if mode == "plain":
        model = model_on(spec, device)
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
    seconds = timed_steps(model, opt, 1, 2)
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
    model = model_on(spec, device)
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
