"""Acceptance of trainer.model type Custom on a memmapped token file (TokenFile): the
factory's model, imported from trainer.codePath, trains under DataParallel, FSDP and
Pipeline (real processes over gloo, fp64) exactly as in one process; a factory that raises,
or a model a pipeline cannot split, ends the run with exit 2 and a message naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from unit.trainer.harness import a_spec, free_port, launch, trainer_env
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_trainer.config import load_config
from dtjob_trainer.errors import EXIT_CONFIG, ConfigError
from dtjob_trainer.models import build_model
from dtjob_trainer.strategies.stage_groups import split_blocks

CODE = str(Path(__file__).parent / "custom_code")
VOCAB, SEQ_LEN = 32, 8


def write_tokens(path: Path, windows: int = 160) -> Path:
    """A nanoGPT-style token file: arithmetic sequences of uint16 ids, `windows` samples."""
    n = windows * SEQ_LEN + 1
    starts = np.repeat(np.arange(n // SEQ_LEN + 1) * 7, SEQ_LEN)[:n]
    strides = np.repeat(np.arange(n // SEQ_LEN + 1) % 5 + 1, SEQ_LEN)[:n]
    tokens = (starts + strides * (np.arange(n) % SEQ_LEN)) % VOCAB
    tokens.astype(np.uint16).tofile(path)
    return path


def custom_spec(
    strategy: str, tokens: Path, factory: str = "tiny_models:residual_mlp", **extra: Any
) -> dict[str, Any]:
    """An fp64 job of the residual MLP factory (4 blocks) on a token file."""
    model = {"type": "Custom", "factory": factory, "kwargs": {"vocab": VOCAB, "width": 16},
             "seqLen": SEQ_LEN}  # fmt: skip
    dataset = {"type": "TokenFile", "path": str(tokens), "evalSamples": 20}
    return a_spec(
        strategy, model=model, dataset=dataset, codePath=CODE, steps=6, batchSize=16, **extra
    )


def pipeline(tokens: Path, schedule: str, **trainer: Any) -> dict[str, Any]:
    spec = custom_spec("Pipeline", tokens, **trainer)
    spec["roles"] = {"stage": {"replicas": 2}}
    spec["strategy"]["pipeline"] = {"schedule": schedule, "microbatches": 4}
    return spec


def cases(tokens: Path) -> dict[str, dict[str, Any]]:
    return {
        "DataParallel": custom_spec("DataParallel", tokens),
        "FSDP": custom_spec("FSDP", tokens, optimizer={"type": "AdamW", "lr": 0.01}),
        "Pipeline-GPipe": pipeline(tokens, "GPipe"),
        "Pipeline-1F1B": pipeline(tokens, "1F1B"),
    }


@pytest.mark.parametrize("name", ["DataParallel", "FSDP", "Pipeline-GPipe", "Pipeline-1F1B"])
def test_custom_model_on_token_file_equals_single_process(name: str, tmp_path: Path) -> None:
    spec = cases(write_tokens(tmp_path / "train.bin"))[name]
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = reference_run(spec)
    assert out.result["steps"] == 6
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")
    # The factory's parameters, not a bundled model's: the embedding is block 0.
    assert out.result["params"]["0.weight"].shape == (VOCAB, 16)
    assert out.result["accuracy"] is not None and 0.0 <= out.result["accuracy"] <= 1.0


def test_every_process_builds_the_same_model_from_the_seed(tmp_path: Path) -> None:
    spec = custom_spec("DataParallel", write_tokens(tmp_path / "t.bin"))
    a, b = (build_model(load_config(spec), torch.float64) for _ in range(2))
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
    spec["trainer"]["seed"] = 1
    c = build_model(load_config(spec), torch.float64)
    assert not torch.equal(a[0].weight, c[0].weight)


def test_a_factory_that_raises_exits_2_with_its_message(tmp_path: Path) -> None:
    spec = custom_spec("DataParallel", write_tokens(tmp_path / "t.bin"), "tiny_models:broken")
    spec["trainer"]["model"]["kwargs"] = {"width": 3}
    out = launch(spec, tmp_path)
    assert out.rc == EXIT_CONFIG, out.output
    assert "trainer.model.factory: tiny_models:broken raised ValueError: width 3 must be even" in (
        out.output
    )
    assert out.result is None


def test_a_missing_module_exits_2_naming_the_code_path(tmp_path: Path) -> None:
    spec = custom_spec("DataParallel", write_tokens(tmp_path / "t.bin"), "no_such_module:build")
    out = launch(spec, tmp_path)
    assert out.rc == EXIT_CONFIG, out.output
    assert "trainer.model.factory: cannot import no_such_module" in out.output
    assert CODE in out.output


def test_pipeline_refuses_a_model_that_is_not_a_sequence(tmp_path: Path) -> None:
    spec = pipeline(write_tokens(tmp_path / "t.bin"), "GPipe", factory="tiny_models:whole")
    spec["trainer"]["model"]["kwargs"] = {"vocab": VOCAB}
    out = launch(spec, tmp_path)
    assert out.rc == EXIT_CONFIG, out.output
    assert "trainer.model.factory: the model has 1 block(s)" in out.output
    assert "fewer than the 2 pipeline stages" in out.output


def test_a_plain_module_trains_under_data_parallel(tmp_path: Path) -> None:
    spec = custom_spec("DataParallel", write_tokens(tmp_path / "t.bin"), "tiny_models:whole")
    spec["trainer"]["model"]["kwargs"] = {"vocab": VOCAB}
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = reference_run(spec)
    assert_params_close(out.result["params"], ref.params, "fp64")
    assert sorted(out.result["params"]) == ["0.embed.weight", "0.head.bias", "0.head.weight"]


def test_a_factory_error_is_the_termination_message(tmp_path: Path) -> None:
    """In a pod, the message goes where the operator reads it (TORCHELASTIC_ERROR_FILE,
    the container's termination message path), so the job ends InvalidSpec with it."""
    spec = custom_spec("DataParallel", write_tokens(tmp_path / "t.bin"), "tiny_models:broken")
    spec["trainer"]["model"]["kwargs"] = {"width": 5}
    spec["roles"] = {"worker": {"replicas": 1}}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(spec))
    error_file = tmp_path / "termination-log"
    env = trainer_env(config, tmp_path / "ckpt", 0, 1, free_port())
    env["TORCHELASTIC_ERROR_FILE"] = str(error_file)
    proc = subprocess.run(
        [sys.executable, "-m", "dtjob_trainer", "run"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert error_file.read_text() == (
        "trainer.model.factory: tiny_models:broken raised ValueError: width 5 must be even"
    )


def test_stage_groups_must_split_a_custom_models_blocks() -> None:
    model = nn.Sequential(*(nn.Linear(2, 2) for _ in range(4)))
    assert [len(s) for s in split_blocks(model, [3, 1])] == [3, 1]
    for sizes in ([2, 1], [4, 0], [3, 3]):
        with pytest.raises(ConfigError, match=r"roles\.stage\.groups: blocks per stage"):
            split_blocks(model, sizes)
