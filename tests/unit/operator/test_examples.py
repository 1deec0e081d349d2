"""Every example manifest is a valid job (pydantic models and validate_job), the set covers
every strategy, and the CPU set really is sized for a laptop-class demo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dtjob_api import GROUP, KIND, VERSION, StrategyType
from dtjob_api.aliases import ALIASES, resolved_type
from dtjob_api.spec import (
    DistributedTrainingJobSpec,
    PipelineSchedule,
    PSMode,
    RoleSpec,
)
from dtjob_api.validation import validate_job
from helpers.examples import load_job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
GPU = sorted(EXAMPLES.glob("*.yaml"))
CPU = sorted((EXAMPLES / "cpu").glob("*.yaml"))
NAMES = {
    "data-parallel", "parameter-server-sync", "parameter-server-async", "hogwild", "easgd",
    "model-parallel", "pipeline-gpipe", "pipeline-1f1b", "pipeline-interleaved", "hybrid",
    "fsdp", "cpu-offload", "auto", "custom-image", "easgd-round-robin", "pipeline-hetero",
    "tf-multi-worker-mirrored", "pipeline-pipedream", "pipeline-pipedream-2bw",
    "tensor-parallel", "pipeline-tensor-parallel", "custom-model", "elastic",
}  # fmt: skip


def load(path: Path) -> dict[str, Any]:
    return load_job(path)


def parsed(path: Path) -> DistributedTrainingJobSpec:
    return DistributedTrainingJobSpec.model_validate(load(path)["spec"])


def roles(spec: DistributedTrainingJobSpec) -> dict[str, RoleSpec]:
    return {n: r for n, r in spec.roles if r is not None}


def test_one_example_per_strategy_in_both_sizes() -> None:
    assert {p.stem for p in GPU} == NAMES
    assert {p.stem for p in CPU} == NAMES
    for paths in (GPU, CPU):
        strategies = {parsed(p).strategy.type for p in paths}
        # Every strategy that runs, and a tf.distribute alias of one (aliases.py).
        assert {resolved_type(s) for s in strategies} == set(ALIASES.values()) | {
            s for s in StrategyType if s not in ALIASES
        }
        assert strategies & {a.value for a in ALIASES}
        modes = {s.parameterServer.mode for p in paths if (s := parsed(p).strategy).parameterServer}
        assert modes == {m.value for m in PSMode}
        schedules = {s.pipeline.schedule for p in paths if (s := parsed(p).strategy).pipeline}
        assert schedules == {s.value for s in PipelineSchedule}


@pytest.mark.parametrize("path", GPU + CPU, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_is_a_valid_job(path: Path) -> None:
    doc = load(path)
    assert doc["apiVersion"] == f"{GROUP}/{VERSION}" and doc["kind"] == KIND
    assert "namespace" not in doc["metadata"], "examples go to the current namespace"
    assert validate_job(doc["spec"], name=doc["metadata"]["name"]) == []
    assert path.read_text().startswith("# "), "examples open with a comment for newcomers"


def test_example_names_are_unique() -> None:
    names = [load(p)["metadata"]["name"] for p in GPU + CPU]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("path", GPU, ids=lambda p: p.stem)
def test_gpu_examples_request_gpus_for_the_training_processes(path: Path) -> None:
    spec = parsed(path)
    trainers = [r for name, r in roles(spec).items() if name != "ps"]
    # A heterogeneous pipeline's GPUs are its stage groups' (some groups are CPU pods).
    gpus = [max([r.gpus, *(g.gpus for g in getattr(r, "groups", None) or [])]) for r in trainers]
    assert trainers and all(g >= 1 for g in gpus)


@pytest.mark.parametrize("path", CPU, ids=lambda p: p.stem)
def test_cpu_examples_are_small(path: Path) -> None:
    spec = parsed(path)
    assert all(r.gpus == 0 for r in roles(spec).values()), "no GPU requests on CPU"
    assert all(r.cpu and r.memory for r in roles(spec).values()), "cpu and memory set"
    processes = sum(r.processes() * r.replicas for r in roles(spec).values())
    if spec.strategy.parameterServer and spec.strategy.parameterServer.mode == PSMode.HOGWILD:
        processes = spec.strategy.parameterServer.hogwildProcesses * roles(spec)["worker"].replicas
    assert 2 <= processes <= 4
    if not spec.trainer.command:
        own = spec.trainer.model.type == "Custom"  # custom-model: its own model and data
        assert own or (spec.trainer.model.type, spec.trainer.dataset.type) == ("MLP", "Digits")
        assert 100 <= spec.trainer.steps <= 1000
