"""Speed options of the bundled trainer: the spec's block options (trainer.compile,
trainer.activationCheckpointing), fused Adam/AdamW on CUDA, TF32 matmuls on CUDA and
pinned, non-blocking input copies. On the CPU nothing changes, so CPU runs stay
bit-for-bit equal to single-process training.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn


def apply_block_options(
    model: nn.Sequential,
    activation_checkpointing: bool,
    compile_blocks: bool,
    backend: str = "inductor",
) -> nn.Sequential:
    """Checkpoint and/or compile every block of `model` in place, before any wrapper
    (DDP, fully_shard) sees it or a pipeline cuts it into stages. Both keep the parameter
    names (checkpoints, sharding, stage modules and the CPU equivalence tests rely on
    them): activation checkpointing is the composable, non-reentrant one that FSDP2
    supports and that a pipeline stage's backward recomputes micro-batch by micro-batch,
    and compilation is `Module.compile`."""
    if not (activation_checkpointing or compile_blocks):
        return model
    from torch.distributed._composable.checkpoint_activation import checkpoint

    for block in model:
        if activation_checkpointing:
            checkpoint(block)
        if compile_blocks:
            block.compile(backend=backend)
    return model


LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def compile_loss(compile_blocks: bool, device: torch.device) -> bool:
    """Whether the training loss is compiled too: with trainer.compile, on CUDA only. A
    GPT's loss upcasts the bf16 logits (batch x seqLen x vocab) to fp32 and reads them
    several times in eager mode; compiled, it is one fused pass, which the smaller models
    feel (the logits are a large part of their step). On the CPU the eager loss stays:
    there it is no bottleneck, and each compiled graph costs a C compiler's run."""
    return compile_blocks and device.type == "cuda"


def training_loss(compiled: bool, backend: str = "inductor") -> LossFn:
    """The trainer's loss (models.loss_fn), compiled when `compiled` (compile_loss)."""
    from dtjob_trainer.models import loss_fn

    if not compiled:
        return loss_fn
    fn: LossFn = torch.compile(loss_fn, backend=backend)
    return fn


def fused_ok(params: Iterable[torch.Tensor]) -> bool:
    """True when a fused optimizer kernel can step `params`: all floating point, all on
    CUDA. Never on the CPU, whose unfused step is the reference of the equivalence tests."""
    params = list(params)
    return bool(params) and all(p.is_cuda and p.is_floating_point() for p in params)


def enable_tf32(device: torch.device) -> bool:
    """Let fp32 matmuls use TF32 tensor cores on CUDA (cuDNN convolutions already do by
    default; fp64 and bf16 are unaffected). Returns whether it did.

    Through `set_float32_matmul_precision("high")`, not torch 2.13's per-backend
    `fp32_precision` setters: after those, the legacy getters that dynamo and inductor
    still call (`get_float32_matmul_precision`, `matmul.allow_tf32`) raise "mix of the
    legacy and new APIs", which would break trainer.compile."""
    if device.type != "cuda":
        return False
    torch.set_float32_matmul_precision("high")
    return True


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` on `device`; to a GPU through pinned host memory with a non-blocking copy, so
    the copy overlaps with the compute still queued."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)
