"""Auto counts activations, not only training state: a step whose activations do not fit
next to a full replica moves the choice; activation checkpointing shrinks the estimate."""

from __future__ import annotations

from dtjob_api.spec import ModelSpec, Precision
from dtjob_trainer.memory_estimate import activation_bytes
from dtjob_trainer.strategies.auto import choose_strategy

GIB = 1 << 30
GPT_350M = ModelSpec(type="GPT", layers=24, dModel=1024, heads=16, seqLen=1024, vocabSize=50304)


def test_huge_activations_move_the_choice_to_fsdp() -> None:
    # 350M params, AdamW, fp32: 5.2 GiB of state, well within 50% of 40 GiB.
    params = 350_000_000
    quiet = choose_strategy(params, Precision.FP32, 2, 8, 40 * GIB)
    assert quiet.strategy == "DataParallel"
    acts = activation_bytes(GPT_350M, 16, Precision.FP32)  # ~32 GiB at seqLen 1024
    # A replica (5.2 GiB) + activations > 90% of 40 GiB; a 1/8 shard + activations fits.
    assert 31 * GIB < acts < 35 * GIB
    moved = choose_strategy(params, Precision.FP32, 2, 8, 40 * GIB, acts)
    assert moved.strategy == "FSDP"
    assert "GiB of activations per rank" in moved.reason


def test_activations_beyond_any_gpu_say_what_to_do() -> None:
    acts = activation_bytes(GPT_350M, 64, Precision.FP32)
    choice = choose_strategy(350_000_000, Precision.FP32, 2, 8, 40 * GIB, acts)
    assert choice.strategy == "CPUOffload"
    assert "trainer.activationCheckpointing" in choice.reason


def test_checkpointing_and_bf16_shrink_the_estimate() -> None:
    full = activation_bytes(GPT_350M, 8, Precision.FP32)
    assert activation_bytes(GPT_350M, 8, Precision.FP32, checkpointing=True) < full / 3
    assert activation_bytes(GPT_350M, 8, Precision.BF16) == full // 2
    mlp = ModelSpec(type="MLP", hiddenSizes=[32, 32])
    assert activation_bytes(mlp, 10, Precision.FP64) == 10 * 8 * (64 + 2 * 64 + 10)
    assert activation_bytes(mlp, 20, Precision.FP64) == 2 * activation_bytes(
        mlp, 10, Precision.FP64
    )
