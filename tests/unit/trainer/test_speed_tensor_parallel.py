"""The speed options under tensor parallelism (TensorParallel, and Pipeline with
strategy.tensorParallel): the trainer checkpoints / compiles the blocks before
parallelize_module splits their layers into DTensor shards, and the hooks of both stay on
the blocks. Checkpointed runs train exactly like single-process ones without it (fp64 over
gloo, GPT: attention heads and MLP halves split), compiled ones within rounding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import COMPILE_TIMEOUT
from unit.trainer.reference import assert_losses_close, assert_params_close
from unit.trainer.test_pipeline_tp import ADAM, spec_3d
from unit.trainer.test_speed_pipelines import run_and_reference
from unit.trainer.test_tensor_parallel import tp_spec


def split(strategy: str, **options: Any) -> dict[str, Any]:
    """A fp64 GPT job split over tp 2: TensorParallel over 2 ranks, or a Pipeline of
    2 stages x tp 2 under 1F1B."""
    if strategy == "TensorParallel":
        return tp_spec(2, 2, "GPT", steps=4, optimizer=ADAM, **options)
    return spec_3d(4, 2, 1, "1F1B", "GPT", steps=4, optimizer=ADAM, **options)


@pytest.mark.parametrize("strategy", ["TensorParallel", "Pipeline"])
def test_checkpointed_split_blocks_train_exactly_like_plain_ones(
    strategy: str, tmp_path: Path
) -> None:
    result, ref = run_and_reference(split(strategy, activationCheckpointing=True), tmp_path)
    assert_losses_close(result["losses"], ref.losses, "fp64")
    assert_params_close(result["params"], ref.params, "fp64")


@COMPILE_TIMEOUT
@pytest.mark.parametrize("strategy", ["TensorParallel", "Pipeline"])
def test_compiled_split_blocks_train_like_eager_ones(strategy: str, tmp_path: Path) -> None:
    spec = split(strategy, compile=True, activationCheckpointing=strategy == "Pipeline")
    result, ref = run_and_reference(spec, tmp_path)
    torch.testing.assert_close(
        torch.tensor(result["losses"]), torch.tensor(ref.losses), rtol=1e-7, atol=1e-9
    )
