"""Refused specs of the trainer's own model and data (trainer.model type Custom, datasets
from files or a factory): (spec, field, words of the message). Shared by
test_validation_custom, test_validation's every-rule-is-exercised check and the API
server's test (integration/test_api_validation_custom)."""

from __future__ import annotations

from typing import Any


def job(strategy: str = "DataParallel", stages: int = 0, **trainer: Any) -> dict[str, Any]:
    """A spec of 2 worker pods (or `stages` stage pods) with these trainer settings."""
    roles = {"stage": {"replicas": stages}} if stages else {"worker": {"replicas": 2}}
    return {"strategy": {"type": strategy}, "roles": roles, "trainer": trainer}


CUSTOM = {"type": "Custom", "factory": "tiny_models:residual_mlp", "kwargs": {"width": 16}}
TOKENS = {"type": "TokenFile", "path": "/data/train.bin"}

CUSTOM_GOOD: list[dict[str, Any]] = [
    job(model=CUSTOM, dataset=TOKENS, codePath="/code"),
    job(model=CUSTOM, dataset={"type": "Digits"}),
    job(model=CUSTOM, dataset={"type": "ImageFolder", "path": "/img", "imageSize": 8}),
    job(model={"type": "MLP"}, dataset={"type": "Custom", "factory": "d:make"}),
    job(model={"type": "GPT"}, dataset={**TOKENS, "testPath": "/data/val.bin", "dtype": "uint32"}),
    job(model={"type": "GPT"}, dataset={"type": "HFDisk", "path": "/hf", "inputColumn": "ids"}),
    # Pipeline: the factory's blocks are counted by the trainer, not the API.
    job("Pipeline", stages=8, model=CUSTOM, dataset=TOKENS),
]

CUSTOM_BAD: list[tuple[dict[str, Any], str, str]] = [
    (job(model={"type": "Custom"}), "spec.trainer.model.factory", "required with"),
    (job(model={"type": "MLP", "factory": "m:f"}), "spec.trainer.model.factory",
     "only allowed with trainer.model.type Custom"),
    (job(model={"type": "GPT", "kwargs": {"a": 1}}, dataset={"type": "SyntheticTokens"}),
     "spec.trainer.model.kwargs", "only allowed with trainer.model.type Custom"),
    (job(dataset={"type": "Custom"}), "spec.trainer.dataset.factory", "required with"),
    (job(dataset={"type": "Digits", "factory": "d:f"}), "spec.trainer.dataset.factory",
     "only allowed with trainer.dataset.type Custom"),
    (job(dataset={"type": "Digits", "kwargs": {"n": 3}}), "spec.trainer.dataset.kwargs",
     "only allowed with trainer.dataset.type Custom"),
    (job(model=CUSTOM, dataset={"type": "TokenFile"}), "spec.trainer.dataset.path",
     "required with trainer.dataset.type TokenFile"),
    (job(dataset={"type": "Digits", "path": "/d"}), "spec.trainer.dataset.path",
     "only allowed with trainer.dataset.type TokenFile"),
    (job(model=CUSTOM, dataset={"type": "Digits", "testPath": "/d"}),
     "spec.trainer.dataset.testPath", "needs trainer.dataset.path"),
    (job(model={"type": "MLP"}, dataset=TOKENS), "spec.trainer.dataset.type",
     "does not fit the model"),
    (job(model={"type": "MLP"}, dataset={"type": "ImageFolder", "path": "/i"}),
     "spec.trainer.dataset.type", "does not fit the model"),
    ({**job(model=CUSTOM), "strategy": {"type": "TensorParallel"}},
     "spec.trainer.model.type", "no tensor-parallel plan"),
    ({**job("Pipeline", stages=2, model=CUSTOM), "strategy": {
        "type": "Pipeline", "tensorParallel": {"size": 2}}},
     "spec.trainer.model.type", "no tensor-parallel plan"),
]  # fmt: skip
