"""Auto: the pure choice from training-state memory vs GPU memory, and a real run that
reports its choice in the log and the progress message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from unit.trainer.harness import a_spec, launch
from unit.trainer.reference import assert_params_close, reference_run

from dtjob_api.spec import OptimizerSpec, Precision
from dtjob_trainer.strategies.auto import choose_strategy, optimizer_slots, state_bytes

GIB = 1 << 30


def test_state_bytes_counts_params_grads_and_optimizer_slots() -> None:
    assert state_bytes(1000, Precision.FP32, 0) == 8000
    assert state_bytes(1000, Precision.FP64, 2) == 32000
    assert state_bytes(1000, Precision.BF16, 2) == 16000  # fp32 master weights
    assert optimizer_slots(OptimizerSpec(type="SGD")) == 0
    assert optimizer_slots(OptimizerSpec(type="SGD", momentum=0.9)) == 1
    assert optimizer_slots(OptimizerSpec(type="AdamW")) == 2


@pytest.mark.parametrize(
    ("params", "gpu", "processes", "want"),
    [
        (100_000_000, 80 * GIB, 8, "DataParallel"),  # 1.6 GB state on an 80 GB GPU
        (1_300_000_000, 24 * GIB, 8, "FSDP"),  # 20.8 GB > 12 GB budget; 2.6 GB shards fit
        (7_000_000_000, 16 * GIB, 2, "CPUOffload"),  # 112 GB / 2 = 56 GB > 8 GB budget
        (7_000_000_000, None, 2, "DataParallel"),  # no GPU
    ],
)
def test_choice(params: int, gpu: int | None, processes: int, want: str) -> None:
    choice = choose_strategy(params, Precision.FP32, 2, processes, gpu)
    assert choice.strategy == want
    assert f"{params:,} parameters" in choice.reason


def test_reason_explains_the_numbers() -> None:
    choice = choose_strategy(1_300_000_000, Precision.FP32, 2, 8, 24 * GIB)
    assert "19.37 GiB of training state" in choice.reason
    assert "50% of 24.0 GiB per GPU" in choice.reason
    assert "1/8 shard (2.42 GiB) fits" in choice.reason


def test_auto_runs_its_choice_and_says_why(tmp_path: Path) -> None:
    spec = a_spec("Auto", steps=6)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    assert out.result["strategy"] == "DataParallel"
    assert out.result["message"].startswith("Auto chose DataParallel: ")
    assert "Auto chose DataParallel: " in out.output
    progress = json.loads((out.checkpoint_dir / "progress.json").read_text())
    assert progress["message"] == out.result["message"]
    assert_params_close(out.result["params"], reference_run(spec).params, "fp64")
