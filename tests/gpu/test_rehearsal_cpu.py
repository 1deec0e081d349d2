"""The GPU cases on the CPU, for the rehearsal (`make gpu-rehearsal`, docs/gpu.md).

Without CUDA every case of test_strategies_cuda skips, so an API that the GPU machine's
torch lacks or changed would surface only in a GPU window. Here each case a single GPU
can run is run instead on the CPU (gloo, no GPUs), with the same assertions bar the
device: the same strategy, checkpoint and reporting code under whatever torch runs the
tests. With CUDA present the CUDA cases cover this, and these skip.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from gpu.test_strategies_cuda import CASES
from unit.trainer.harness import launch

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="CUDA is here: test_strategies_cuda runs these on it"
)
ONE_GPU = [name for name, (_, needs) in CASES.items() if needs == 1]


def on_cpu(spec: dict[str, Any]) -> dict[str, Any]:
    cpu = copy.deepcopy(spec)
    cpu["strategy"]["backend"] = "gloo"
    for role in cpu["roles"].values():
        role.pop("gpus", None)
    return cpu


def test_every_one_gpu_case_is_rehearsed() -> None:
    # The parametrisation below would pass vacuously if the selection came out empty.
    assert {"DataParallel", "FSDP", "CPUOffload", "PS-Async", "PS-Hogwild"} <= set(ONE_GPU)


@pytest.mark.parametrize("name", ONE_GPU)
def test_case_trains_on_cpu(name: str, tmp_path: Path) -> None:
    out = launch(on_cpu(CASES[name][0]), tmp_path, timeout=240)
    assert out.rc == 0, out.output
    assert out.result is not None
    losses = out.result["losses"]
    assert losses and all(math.isfinite(x) for x in losses)
    assert min(losses[-5:]) < losses[0], losses
