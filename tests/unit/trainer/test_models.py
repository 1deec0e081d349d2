"""Models: seeded initialisation, stage splits that keep names and compose to the model."""

from __future__ import annotations

import pytest
import torch
from unit.trainer.harness import a_spec

from dtjob_trainer.config import load_config
from dtjob_trainer.models import (
    build_model,
    loss_fn,
    model_parameter_count,
    split_into_stages,
    stage_bounds,
)

GPT = a_spec(
    "DataParallel",
    model={"type": "GPT", "layers": 3, "dModel": 32, "heads": 4, "seqLen": 8, "vocabSize": 50},
    dataset={"type": "SyntheticTokens", "samples": 64},
)
MODELS = {
    "mlp": a_spec("DataParallel"),
    "cnn": a_spec("DataParallel", model={"type": "CNN"}),
    "gpt": GPT,
}


def _input(name: str) -> torch.Tensor:
    if name == "gpt":
        return torch.randint(0, 50, (4, 8))
    return torch.rand(4, 64, dtype=torch.float64)


@pytest.mark.parametrize("name", list(MODELS))
def test_initialisation_is_a_function_of_the_seed(name: str) -> None:
    cfg = load_config(MODELS[name])
    a, b = build_model(cfg, torch.float64), build_model(cfg, torch.float64)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert na == nb and torch.equal(pa, pb)
    other = load_config({**MODELS[name], "trainer": {**MODELS[name]["trainer"], "seed": 1}})
    assert not torch.equal(next(build_model(other).parameters()), next(a.parameters()).float())
    # The blocks dtjob_api's rules count (pipeline stages <= blocks) are the model's.
    assert len(a) == cfg.facts.modelBlocks
    assert sum(p.numel() for p in a.parameters()) == model_parameter_count(cfg)


@pytest.mark.parametrize(("name", "stages"), [("mlp", 2), ("mlp", 4), ("cnn", 2), ("gpt", 3)])
def test_stages_compose_to_the_model_and_keep_names(name: str, stages: int) -> None:
    cfg = load_config(MODELS[name])
    model = build_model(cfg, torch.float64)
    parts = split_into_stages(model, stages)
    assert len(parts) == stages
    x = _input(name)
    y = x
    for part in parts:
        y = part(y)
    torch.testing.assert_close(y, model(x), rtol=0, atol=0)
    names = [n for part in parts for n, _ in part.named_parameters()]
    assert names == [n for n, _ in model.named_parameters()]


def test_stage_bounds_are_contiguous_and_balanced() -> None:
    assert stage_bounds(4, 2) == [(0, 2), (2, 4)]
    assert stage_bounds(5, 3) == [(0, 2), (2, 4), (4, 5)]
    with pytest.raises(ValueError, match="cannot split 4 blocks into 5 stages"):
        stage_bounds(4, 5)


def test_mlp_shape_and_no_normalisation_or_dropout() -> None:
    model = build_model(load_config(a_spec("DataParallel", model={"hiddenSizes": [16, 8]})))
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(16, 64), (16,), (8, 16), (8,), (10, 8), (10,)]
    kinds = {type(m).__name__ for m in model.modules()}
    assert not kinds & {"BatchNorm1d", "Dropout", "LayerNorm"}


def test_loss_is_mean_cross_entropy_over_every_prediction() -> None:
    logits = torch.randn(2, 3, 5)
    target = torch.randint(0, 5, (2, 3))
    expected = torch.nn.functional.cross_entropy(logits.reshape(6, 5), target.reshape(6))
    assert torch.equal(loss_fn(logits, target), expected)


def test_billion_parameter_gpt_is_counted_without_building_it() -> None:
    cfg = load_config(
        a_spec(
            "FSDP",
            model={
                "type": "GPT",
                "layers": 24,
                "dModel": 2048,
                "heads": 16,
                "seqLen": 1024,
                "vocabSize": 32000,
            },
            dataset={"type": "SyntheticTokens"},
        )
    )
    assert 1.0e9 < model_parameter_count(cfg) < 1.4e9
