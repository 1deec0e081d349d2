"""FSDP at scale, on CPU: a model built on the meta device and materialised shard by shard
starts from exactly the single-process model's parameters while each rank allocates only
its shards; a sharded checkpoint written by 4 processes resumes at 2 (FSDP, DataParallel
reading whole tensors, and a 2-stage Pipeline) on the uninterrupted loss trajectory."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import a_spec, launch
from unit.trainer.ranks import run_ranks
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.config import load_config
from dtjob_trainer.errors import EXIT_CONFIG
from dtjob_trainer.models import build_model

# Row counts that do not divide by 3 ranks (5, 7, 10, and biases of 2 rows with the last
# rank's shard empty), and a GPT with embeddings and LayerNorms.
MODELS = {
    "MLP-uneven": {"type": "MLP", "hiddenSizes": [5, 7]},
    "GPT": {"type": "GPT", "layers": 2, "dModel": 16, "heads": 2, "seqLen": 8, "vocabSize": 11},
}


def _spec(model: dict[str, Any]) -> dict[str, Any]:
    data = {"type": "SyntheticTokens"} if model["type"] == "GPT" else {"type": "Digits"}
    return a_spec("FSDP", model=model, dataset=data)


def _materialise(rank: int, world: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Rank body: meta model -> fully_shard -> materialise; full parameters and what this
    rank allocated."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dtjob_trainer.meta_init import materialize_sharded

    cfg = load_config(spec)
    model = build_model(cfg, torch.float64, meta=True)
    assert all(p.is_meta for p in model.parameters())
    mesh = init_device_mesh("cpu", (world,))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    materialize_sharded(model, cfg, torch.float64, torch.device("cpu"))
    local = sum(p.to_local().numel() for p in model.parameters())
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    return {"local": local, "params": full}


@pytest.mark.parametrize("model", list(MODELS))
def test_meta_init_equals_the_single_process_model(model: str, tmp_path: Path) -> None:
    spec = _spec(MODELS[model])
    world = 3
    results = run_ranks(_materialise, world, spec, workdir=tmp_path)
    want = build_model(load_config(spec), torch.float64)
    total = sum(p.numel() for p in want.parameters())
    expected = {n: p.detach() for n, p in want.named_parameters()}
    for r in results:
        assert_params_close(r["params"], expected, "fp64")
        for name, value in expected.items():  # not close: identical
            assert torch.equal(r["params"][name], value), name
    # Each rank holds its shard (torch.chunk rows of every parameter), together the model.
    assert sum(r["local"] for r in results) == total
    assert max(r["local"] for r in results) < total / 2


def _resized_spec(strategy: str, steps: int) -> dict[str, Any]:
    return a_spec(
        strategy,
        steps=steps,
        checkpoint_every=6,
        optimizer={"type": "Adam", "lr": 0.01},
    )


@pytest.fixture(scope="module")
def written_by_4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint of step 6 of an FSDP run over 4 processes."""
    workdir = tmp_path_factory.mktemp("fsdp4")
    out = launch(_resized_spec("FSDP", 6), workdir, "--nproc", "4")
    assert out.rc == 0, out.output
    assert Checkpointer(out.checkpoint_dir).steps() == [6]
    assert (out.checkpoint_dir / "step-000000006" / "__3_0.distcp").is_file()
    return out.checkpoint_dir


@pytest.mark.parametrize("strategy", ["FSDP", "DataParallel"])
def test_checkpoint_of_4_processes_resumes_at_2(
    strategy: str, written_by_4: Path, tmp_path: Path
) -> None:
    spec = _resized_spec(strategy, 12)
    shutil.copytree(written_by_4, tmp_path / "job-ckpt")
    out = launch(spec, tmp_path, "--nproc", "2")
    assert out.rc == 0, out.output
    assert out.result is not None
    assert out.result["start_step"] == 6
    ref = reference_run(spec)
    assert_losses_close(out.result["losses"], ref.losses[6:], "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


def test_a_pipeline_resumes_from_it(written_by_4: Path, tmp_path: Path) -> None:
    # Pipelines write and read FSDP's sharded layout (strategies/stage_ckpt.py).
    spec = a_spec(
        "Pipeline", workers=None, stages=2, steps=12, checkpoint_every=6,
        optimizer={"type": "Adam", "lr": 0.01},
    )  # fmt: skip
    shutil.copytree(written_by_4, tmp_path / "job-ckpt")
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None and out.result["start_step"] == 6
    ref = reference_run(spec)
    assert_losses_close(out.result["losses"], ref.losses[6:], "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


def test_a_strategy_without_sharded_loading_refuses_clearly(
    written_by_4: Path, tmp_path: Path
) -> None:
    # PipeDream's driver keeps full checkpoints only.
    extra = {"pipeline": {"schedule": "PipeDream", "microbatches": 2}}
    spec = a_spec("Pipeline", workers=None, stages=2, steps=12, strategy_extra=extra)
    shutil.copytree(written_by_4, tmp_path / "job-ckpt")
    out = launch(spec, tmp_path)
    assert out.rc == EXIT_CONFIG, out.output
    assert "step-000000006, is sharded" in out.output and "reads only full" in out.output
