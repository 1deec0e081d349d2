"""A Custom model on a memmapped token file behind the other strategies: the synchronous
ones (ModelParallel, Interleaved1F1B, Hybrid, ParameterServer Sync, CPUOffload, Auto) equal
single-process training (fp64); the asynchronous ones (PipeDream, Hogwild, EASGD) train it
to the end. test_custom_model.py covers DataParallel, FSDP and GPipe/1F1B."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from unit.trainer.harness import launch
from unit.trainer.reference import assert_run_equals_reference
from unit.trainer.test_custom_model import custom_spec, write_tokens


def with_roles(spec: dict[str, Any], **roles: int) -> dict[str, Any]:
    spec["roles"] = {role: {"replicas": n} for role, n in roles.items()}
    return spec


def stages(tokens: Path, strategy: str, n: int, **settings: Any) -> dict[str, Any]:
    spec = with_roles(custom_spec(strategy, tokens), stage=n)
    spec["strategy"].update(settings)
    return spec


def ps(tokens: Path, mode: str, workers: int, servers: int | None, **extra: Any) -> Any:
    spec = custom_spec("ParameterServer", tokens)
    spec["strategy"]["parameterServer"] = {"mode": mode, **extra}
    roles = {"worker": workers, **({"ps": servers} if servers else {})}
    return with_roles(spec, **roles)


SYNC = {
    "ModelParallel": lambda t: stages(t, "ModelParallel", 2),
    "Pipeline-Interleaved1F1B": lambda t: stages(
        t, "Pipeline", 2, pipeline={"schedule": "Interleaved1F1B", "microbatches": 4,
                                    "stagesPerRank": 2}),
    "Hybrid": lambda t: stages(
        t, "Hybrid", 4, pipeline={"schedule": "GPipe", "microbatches": 2},
        hybrid={"dataParallel": 2}),
    "PSSync": lambda t: ps(t, "Sync", 2, 1),
    "CPUOffload": lambda t: custom_spec("CPUOffload", t),
    "Auto": lambda t: custom_spec("Auto", t),
}  # fmt: skip
ASYNC = {
    "PipeDream": lambda t: stages(t, "Pipeline", 2, pipeline={"schedule": "PipeDream",
                                                              "microbatches": 2}),
    "Hogwild": lambda t: ps(t, "Hogwild", 1, None, hogwildProcesses=2),
    "EASGD": lambda t: ps(t, "EASGD", 2, None),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SYNC))
def test_synchronous_strategy_equals_single_process(name: str, tmp_path: Path) -> None:
    spec = SYNC[name](write_tokens(tmp_path / "train.bin"))
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert_run_equals_reference(out.result, spec)


@pytest.mark.parametrize("name", list(ASYNC))
def test_asynchronous_strategy_trains_it_to_the_end(name: str, tmp_path: Path) -> None:
    spec = ASYNC[name](write_tokens(tmp_path / "train.bin"))
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None and out.result["steps"] == spec["trainer"]["steps"]
    assert out.result["params"]["0.weight"].shape == (32, 16)  # the factory's embedding
    assert out.result["accuracy"] is not None and math.isfinite(out.result["accuracy"])
