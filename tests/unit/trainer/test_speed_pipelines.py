"""The speed options in the pipelines of torch.distributed.pipelining (Pipeline under each
of its schedules, Hybrid, ModelParallel): every block of a stage checkpointed trains
exactly like the run without it (fp64 over gloo: the recomputation inside the stage's
backward, micro-batch by micro-batch, gives the same gradients), and compiled blocks run
inside the schedule and train within rounding of eager ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from unit.trainer.harness import COMPILE_SECONDS, COMPILE_TIMEOUT, a_spec, launch
from unit.trainer.ranks import run_ranks, strategy_context
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run


def pipelined(strategy: str, schedule: str = "GPipe", **trainer: Any) -> dict[str, Any]:
    """A `strategy` job of single-process stage pods (fp64 MLP, 4 blocks): Pipeline over
    2 ranks (2 chunks each under Interleaved1F1B), Hybrid 2 x 2, ModelParallel over 2."""
    extra: dict[str, Any] = {}
    stages = 2
    if strategy != "ModelParallel":
        extra["pipeline"] = {"schedule": schedule, "microbatches": 4, "stagesPerRank": 2}
    if strategy == "Hybrid":
        extra["hybrid"] = {"dataParallel": 2}
        stages = 4
    return a_spec(strategy, workers=None, stages=stages, strategy_extra=extra, **trainer)


def without_options(spec: dict[str, Any]) -> dict[str, Any]:
    off = {"compile": False, "activationCheckpointing": False}
    return {**spec, "trainer": {**spec["trainer"], **off}}


def run_and_reference(spec: dict[str, Any], tmp_path: Path) -> tuple[Any, Any]:
    """The launched job's result (rank 0 logs the options it applied) and the
    single-process run of the same spec without the options. The plain pipelines equal
    single-process training (test_pipeline.py and friends), so that is the reference."""
    t = spec["trainer"]
    options = [
        ("activation checkpointing", "activationCheckpointing"),
        ("torch.compile", "compile"),
    ]
    logged = " + ".join(words for words, field in options if t.get(field))
    out = launch(spec, tmp_path, timeout=COMPILE_SECONDS if t.get("compile") else 240)
    assert out.rc == 0, out.output
    assert f"model blocks: {logged}\n" in out.output
    assert out.result is not None
    return out.result, reference_run(without_options(spec))


CHECKPOINTED = {
    "Pipeline-GPipe": pipelined("Pipeline", "GPipe", activationCheckpointing=True),
    "Pipeline-1F1B": pipelined("Pipeline", "1F1B", activationCheckpointing=True),
    "Pipeline-Interleaved1F1B": pipelined(
        "Pipeline", "Interleaved1F1B", activationCheckpointing=True
    ),
    "Hybrid-1F1B": pipelined("Hybrid", "1F1B", activationCheckpointing=True),
    "ModelParallel": pipelined("ModelParallel", activationCheckpointing=True),
}


@pytest.mark.parametrize("name", list(CHECKPOINTED))
def test_checkpointed_stages_train_exactly_like_plain_ones(name: str, tmp_path: Path) -> None:
    result, ref = run_and_reference(CHECKPOINTED[name], tmp_path)
    assert_losses_close(result["losses"], ref.losses, "fp64")
    assert_params_close(result["params"], ref.params, "fp64")


def count_training_forwards(rank: int, world: int, spec: dict[str, Any], workdir: str) -> int:
    """Rank body: the strategy's own run, counting the forwards of this rank's layers that
    record a graph (training forwards and their recomputations, not evaluation)."""
    from dtjob_trainer.strategies import pipeline

    calls = [0]

    def count(*_: Any) -> None:
        calls[0] += torch.is_grad_enabled()

    # run_pipeline hands the stages it built to schedule_stages: count on what it returns.
    build = pipeline.schedule_stages

    def counting_build(*args: Any, **kwargs: Any) -> Any:
        schedule, stages = build(*args, **kwargs)
        for stage in stages:
            for layer in stage.modules():
                if isinstance(layer, nn.Linear):
                    layer.register_forward_pre_hook(count)
        return schedule, stages

    pipeline.schedule_stages = counting_build  # type: ignore[assignment]
    pipeline.run(strategy_context(spec, rank, world, Path(workdir) / str(rank)))
    return calls[0]


def test_the_pipeline_stage_recomputes_each_micro_batch(tmp_path: Path) -> None:
    # What checkpointing inside the schedule means: the layers of a stage run their forward
    # again in the backward of each micro-batch. (How many of them torch's recomputation
    # reaches before it has every saved tensor back is its business: at least one per
    # micro-batch, on every rank, is ours.)
    spec = pipelined("Pipeline", "Interleaved1F1B", steps=2, activationCheckpointing=True)
    checkpointed = run_ranks(count_training_forwards, 2, spec, str(tmp_path), workdir=tmp_path)
    plain = without_options(spec)
    eager = run_ranks(count_training_forwards, 2, plain, str(tmp_path / "p"), workdir=tmp_path)
    backwards = 2 * 4  # steps x micro-batches
    assert all(n >= backwards for n in eager)
    assert all(c - e >= backwards for c, e in zip(checkpointed, eager, strict=True))


COMPILED = {
    "Pipeline-Interleaved1F1B": pipelined(
        "Pipeline", "Interleaved1F1B", steps=6, compile=True, activationCheckpointing=True
    ),
    "Hybrid-GPipe": pipelined("Hybrid", "GPipe", steps=6, compile=True),
    "ModelParallel": pipelined("ModelParallel", steps=6, compile=True),
}


@pytest.mark.parametrize("name", list(COMPILED))
@COMPILE_TIMEOUT
def test_compiled_stages_train_like_eager_ones(name: str, tmp_path: Path) -> None:
    # Inductor on the CPU, blocks compiled before the model is cut into stages: within
    # rounding of single-process eager training (the tolerance of the CPUOffload test).
    result, ref = run_and_reference(COMPILED[name], tmp_path)
    torch.testing.assert_close(
        torch.tensor(result["losses"]), torch.tensor(ref.losses), rtol=1e-7, atol=1e-9
    )


def test_why_stashed_weight_stages_refuse_checkpointing() -> None:
    # PipeDream's stages (and stage groups) run a block through functional_call on a
    # stashed copy of its weights; the backward comes after the live weights moved on. A
    # checkpointed block recomputes with the module's own, live, weights: wrong gradients.
    # This is the reason the API gives (api/dtjob_api/speed_rules.py).
    from torch.func import functional_call

    from dtjob_trainer.speed import apply_block_options

    def stashed_grads(checkpointed: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        block = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh())
        model = apply_block_options(nn.Sequential(block).double(), checkpointed, False)
        stash = {n: p.detach().clone().requires_grad_() for n, p in model.named_parameters()}
        out = functional_call(model, stash, (torch.ones(3, 4, dtype=torch.float64),))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # an optimizer step on the live weights
        out.sum().backward()
        return [w.grad for w in stash.values() if w.grad is not None]

    plain, recomputed = stashed_grads(False), stashed_grads(True)
    assert len(plain) == len(recomputed) == 4
    assert not all(torch.allclose(a, b) for a, b in zip(plain, recomputed, strict=True))
