"""The speed options: activation checkpointing changes nothing but memory (exact on the
CPU, in-process and in real DataParallel / FSDP / PS runs), compiled blocks train within
rounding of eager ones, and the CUDA-only paths (fused optimizer, TF32, pinned copies)
leave the CPU untouched so the equivalence tests stay bit-exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from unit.trainer.harness import COMPILE_SECONDS, COMPILE_TIMEOUT, a_spec, launch
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_api.spec import OptimizerSpec
from dtjob_trainer.models import loss_fn
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.speed import (
    apply_block_options,
    compile_loss,
    enable_tf32,
    fused_ok,
    to_device,
    training_loss,
)


def tiny(dtype: torch.dtype = torch.float64) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Linear(8, 16), nn.ReLU()),
        nn.Sequential(nn.Linear(16, 16), nn.Tanh()),
        nn.Linear(16, 3),
    ).to(dtype)


def train(model: nn.Module, steps: int = 4) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(6, 8, generator=gen, dtype=next(model.parameters()).dtype)
        y = torch.randint(0, 3, (6,), generator=gen)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_checkpointed_blocks_give_the_same_gradients_and_names() -> None:
    plain, ckpt = tiny(), apply_block_options(tiny(), True, False)
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in ckpt.named_parameters()]
    assert train(plain) == train(ckpt)
    for p, q in zip(plain.parameters(), ckpt.parameters(), strict=True):
        assert torch.equal(p, q)


def test_compiled_blocks_train_within_rounding() -> None:
    eager = train(tiny(torch.float32), steps=3)
    compiled_model = apply_block_options(tiny(torch.float32), False, True)
    assert list(compiled_model.state_dict()) == list(tiny().state_dict())
    torch.testing.assert_close(train(compiled_model, steps=3), eager, rtol=1e-4, atol=1e-5)


def test_the_loss_is_compiled_with_the_blocks_on_cuda_only() -> None:
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert compile_loss(True, cuda)
    assert not compile_loss(False, cuda) and not compile_loss(True, cpu)
    assert training_loss(False) is loss_fn


def test_a_compiled_loss_equals_the_eager_one() -> None:
    logits = torch.randn(3, 5, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (3, 5))
    compiled = training_loss(True, backend="aot_eager")
    assert compiled is not loss_fn
    eager_grad = torch.autograd.grad(loss_fn(logits, target), logits)[0]
    torch.testing.assert_close(compiled(logits, target), loss_fn(logits, target))
    torch.testing.assert_close(torch.autograd.grad(compiled(logits, target), logits)[0], eager_grad)


def test_no_option_returns_the_model_untouched() -> None:
    model = tiny()
    assert apply_block_options(model, False, False) is model
    assert not model[0]._forward_hooks and not model[0]._forward_pre_hooks


def test_cpu_paths_are_unchanged() -> None:
    params = list(tiny().parameters())
    assert not fused_ok(params) and not fused_ok([])
    adam = build_optimizer(params, OptimizerSpec(type="AdamW", lr=0.01))
    assert adam.defaults["fused"] is None and adam.defaults["foreach"] is None
    before = torch.get_float32_matmul_precision()
    assert not enable_tf32(torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == before
    x = torch.arange(4.0)
    assert torch.equal(to_device(x, torch.device("cpu")), x)


def test_tf32_leaves_every_precision_getter_readable() -> None:
    # The flags are global and need no GPU to set; dynamo and inductor read them through
    # the legacy getters, which raise once the per-backend API has been mixed in.
    before = torch.get_float32_matmul_precision()
    try:
        assert enable_tf32(torch.device("cuda"))
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fused kernels need CUDA")
def test_cuda_parameters_get_the_fused_optimizer() -> None:
    params = list(tiny(torch.float32).cuda().parameters())
    assert fused_ok(params)
    assert build_optimizer(params, OptimizerSpec(type="Adam")).defaults["fused"] is True


CASES = {
    "DataParallel": a_spec("DataParallel", activationCheckpointing=True),
    "FSDP": a_spec(
        "FSDP",
        activationCheckpointing=True,
        optimizer={"type": "AdamW", "lr": 0.01, "weightDecay": 0.01},
    ),
    "PSSync": a_spec(
        "ParameterServer",
        ps=1,
        activationCheckpointing=True,
        strategy_extra={"parameterServer": {"mode": "Sync"}},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_activation_checkpointing_equals_single_process(name: str, tmp_path: Path) -> None:
    spec: dict[str, Any] = CASES[name]
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert "model blocks: activation checkpointing" in out.output
    assert out.result is not None
    plain = {**spec, "trainer": {**spec["trainer"], "activationCheckpointing": False}}
    ref = reference_run(plain)
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


@COMPILE_TIMEOUT
def test_compiled_and_checkpointed_cpu_offload_trains_like_one_process(tmp_path: Path) -> None:
    # FSDP2 with CPUOffloadPolicy over 2 ranks, every block checkpointed and compiled
    # (inductor on the CPU): within rounding of single-process eager training.
    spec = a_spec("CPUOffload", steps=6, compile=True, activationCheckpointing=True)
    out = launch(spec, tmp_path, timeout=COMPILE_SECONDS)
    assert out.rc == 0, out.output
    assert "model blocks: activation checkpointing + torch.compile" in out.output
    assert out.result is not None
    plain = {**spec, "trainer": {**spec["trainer"], "compile": False}}
    plain["trainer"]["activationCheckpointing"] = False
    ref = reference_run(plain)
    torch.testing.assert_close(
        torch.tensor(out.result["losses"]), torch.tensor(ref.losses), rtol=1e-7, atol=1e-9
    )
