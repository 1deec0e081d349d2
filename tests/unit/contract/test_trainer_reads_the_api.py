"""The trainer reads its job config through dtjob_api, not a copy of it: it defines no model
of a spec section and no enum of the spec's values, and its config is made of dtjob_api's
models. A job the operator accepts is a config the trainer accepts, through the bytes the
operator mounts and as `launch` reads the manifest; for a job that runs the bundled trainer
the two refuse exactly the same specs."""

from __future__ import annotations

import ast
import copy
import enum
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import dtjob_api.spec
from dtjob_api.validation import validate_job
from dtjob_operator.builders.configmaps import config_json
from dtjob_operator.builders.job import Job
from dtjob_trainer.config import TrainerConfig, load_config
from dtjob_trainer.errors import ConfigError
from helpers.examples import load_job

REPO = Path(__file__).resolve().parents[3]
TRAINER = REPO / "trainer_image" / "dtjob_trainer"
MODULES = sorted(TRAINER.rglob("*.py"))
EXAMPLES = sorted([*(REPO / "examples").glob("*.yaml"), *(REPO / "examples").glob("cpu/*.yaml")])
API_ENUMS = [
    obj
    for obj in vars(dtjob_api.spec).values()
    if isinstance(obj, type) and issubclass(obj, enum.Enum) and obj.__module__ != "enum"
]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _example_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_the_trainer_defines_no_pydantic_model() -> None:
    assert len(MODULES) > 20, "the trainer's modules were found"
    importers = []
    for path in MODULES:
        for node in ast.walk(_tree(path)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.split(".")[0] == "pydantic" for n in names):
                importers.append(str(path.relative_to(TRAINER)))
    assert importers == [], "spec models belong in dtjob_api (api/dtjob_api/spec.py)"
    assert not (TRAINER / "aliases.py").exists(), "aliases live in dtjob_api.aliases"


def test_no_trainer_enum_relists_the_values_of_a_spec_enum() -> None:
    assert {e.__name__ for e in API_ENUMS} >= {"StrategyType", "PSMode", "ModelType"}
    copies = []
    for path in MODULES:
        for cls in (n for n in ast.walk(_tree(path)) if isinstance(n, ast.ClassDef)):
            values = {
                node.value.value
                for node in cls.body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            }
            copies += [
                f"{path.name}:{cls.name} ~ {api.__name__}"
                for api in API_ENUMS
                if len(values & {m.value for m in api}) >= 2
            ]
    assert copies == []


def test_the_config_is_made_of_dtjob_apis_models() -> None:
    cfg = load_config(yaml.safe_load((REPO / "examples/cpu/hybrid.yaml").read_text())["spec"])
    assert isinstance(cfg.spec, dtjob_api.spec.DistributedTrainingJobSpec)
    sections = (cfg.strategy, cfg.roles, cfg.trainer, cfg.checkpoint, cfg.network)
    assert [type(s).__module__.split(".")[0] for s in sections] == ["dtjob_api"] * 5
    assert type(cfg.pipeline) is dtjob_api.spec.PipelineSpec


def _manifest(path: Path) -> dict[str, Any]:
    return load_job(path)


@pytest.mark.parametrize("path", EXAMPLES, ids=_example_id)
def test_a_job_the_operator_accepts_is_a_config_the_trainer_accepts(path: Path) -> None:
    doc = _manifest(path)
    assert validate_job(doc["spec"], name=doc["metadata"]["name"]) == []
    job = Job(name=doc["metadata"]["name"], namespace="ns", uid="u", spec=_parse(doc["spec"]))
    # In a pod: exactly the bytes the operator mounts at DTJ_CONFIG.
    mounted = load_config(json.loads(config_json(job)))
    assert mounted.spec == job.spec
    # With `launch`: the manifest as written (a tf.distribute alias included).
    assert load_config(doc["spec"]) == mounted


def _parse(spec: dict[str, Any]) -> dtjob_api.spec.DistributedTrainingJobSpec:
    return dtjob_api.spec.DistributedTrainingJobSpec.model_validate(spec)


def _trainer_accepts(spec: dict[str, Any]) -> bool:
    try:
        return isinstance(load_config(spec), TrainerConfig)
    except ConfigError:
        return False


BUNDLED = [p for p in EXAMPLES if "command" not in _manifest(p)["spec"].get("trainer", {})]


@pytest.mark.parametrize("path", BUNDLED, ids=_example_id)
def test_operator_and_trainer_refuse_the_same_variants_of_a_bundled_job(path: Path) -> None:
    # Batch sizes and gang sizes around the example's: the rules that tie them together
    # (batch splits, micro-batches, stages vs blocks, Hybrid's grid) fire on some of them.
    base = _manifest(path)["spec"]
    main = "stage" if "stage" in base["roles"] else "worker"
    verdicts = set()
    for replicas in (1, 2, 3, 4):
        for batch in (1, 6, 8, 12, 30, 64):
            spec = copy.deepcopy(base)
            spec["roles"][main]["replicas"] = replicas
            spec["roles"][main].pop("groups", None)
            spec.setdefault("trainer", {})["batchSize"] = batch
            operator_ok = validate_job(spec) == []
            assert _trainer_accepts(spec) == operator_ok, (replicas, batch)
            verdicts.add(operator_ok)
    assert verdicts == {True, False}, "the variants exercise both answers"
