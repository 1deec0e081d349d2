"""The GPU test cases (tests/gpu, run by `make test-gpu` on a CUDA machine) are valid jobs
of the sizes they claim, so a GPU run never fails on a spec that CPU CI could have caught."""

from __future__ import annotations

import pytest
from gpu.test_strategies_cuda import CASES

from dtjob_api.validation import validate_job
from dtjob_trainer.config import load_config


@pytest.mark.parametrize("name", list(CASES))
def test_gpu_case_is_a_valid_job(name: str) -> None:
    spec, gpus = CASES[name]
    assert validate_job(spec, name="gpu-case") == []
    cfg = load_config(spec)
    if spec["strategy"]["backend"] == "nccl":
        assert cfg.world_size() == gpus  # one rank per GPU
    else:
        assert gpus == 1  # gloo: every rank shares the one GPU
