"""tf.distribute strategy names as aliases: each resolves to its target, the rules hold it
to exactly its target's roles and sizes (in Python and in the CEL the CRD carries), and the
operator builds, tells the pods and reports the target."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from dtjob_api.aliases import resolve, resolved_type
from dtjob_api.facts import Facts
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.status import JobPhase
from dtjob_api.validation import validate_job
from dtjob_operator.builders.configmaps import config_json
from dtjob_operator.builders.job import Job
from dtjob_operator.envcontract import build_env
from dtjob_operator.status import StatusDecision, compute_status
from dtjob_trainer.config import load_config
from dtjob_trainer.errors import ConfigError

WORKERS = {"worker": {"replicas": 2}}
PS = {"worker": {"replicas": 2}, "ps": {}}
CASES = [
    ("MirroredStrategy", WORKERS, "DataParallel", None),
    ("MultiWorkerMirroredStrategy", WORKERS, "DataParallel", None),
    ("CentralStorageStrategy", WORKERS, "CPUOffload", None),
    ("ParameterServerStrategy", PS, "ParameterServer", "Async"),
]


def a_spec(kind: str, roles: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"strategy": {"type": kind, **extra}, "roles": roles, "trainer": {"batchSize": 32}}


def a_job(spec: dict[str, Any]) -> Job:
    return Job.from_object({"metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": spec})


@pytest.mark.parametrize(("alias", "roles", "target", "mode"), CASES)
def test_alias_resolves_to_its_target(
    alias: str, roles: dict[str, Any], target: str, mode: str | None
) -> None:
    assert resolved_type(alias) == target
    spec = DistributedTrainingJobSpec.model_validate(a_spec(alias, roles))
    resolved = resolve(spec)
    assert resolved.strategy.type == target
    ps = resolved.strategy.parameterServer
    assert (ps.mode if ps else None) == mode
    assert spec.strategy.type == alias  # the parsed manifest is left as written
    # Everything downstream sees the target: the builders' job, the pods' env, the config
    # the trainer reads (which the trainer accepts), and the status the operator writes.
    job = a_job(a_spec(alias, roles))
    assert job.spec.strategy.type == target
    env = {e["name"]: e["value"] for e in build_env("j", "ns", job.spec, "worker", 0, 1)}
    assert env["DTJ_STRATEGY"] == target
    assert ("DTJ_PS_HOSTS" in env) == (target == "ParameterServer")
    cfg = load_config(json.loads(config_json(job)))
    assert cfg.strategy.type == target
    assert cfg.parameter_server.mode == (mode or "Sync")
    decision = StatusDecision(phase=JobPhase.PENDING)
    now = datetime.now(UTC)
    status = compute_status({}, job.spec, decision, now=now, observed_generation=1, progress=None)
    assert status["strategy"] == target


def test_a_plain_strategy_is_left_alone() -> None:
    spec = DistributedTrainingJobSpec.model_validate(a_spec("DataParallel", WORKERS))
    assert resolve(spec) is spec
    assert a_job(a_spec("Auto", WORKERS)).spec.strategy.type == "Auto"


@pytest.mark.parametrize(("alias", "roles", "target", "mode"), CASES)
def test_rules_treat_an_alias_exactly_like_its_target(
    alias: str, roles: dict[str, Any], target: str, mode: str | None
) -> None:
    extra = {"parameterServer": {"mode": mode}} if mode else {}
    # Good and bad role sets, judged the same for alias and target (same fields blamed).
    for r in (roles, {"stage": {"replicas": 2}}, {**roles, "ps": {}}, {"worker": {"replicas": 3}},
              {"worker": {"replicas": 2}}):  # fmt: skip
        got = [e.field for e in validate_job(a_spec(alias, r))]
        want = [e.field for e in validate_job(a_spec(target, r, **extra))]
        assert got == want, (alias, r)
    facts = Facts.of(DistributedTrainingJobSpec.model_validate(a_spec(alias, roles)))
    assert facts.strategy == target and facts.declared == alias
    assert facts.mode == (mode or "Sync")


def test_wrong_roles_of_an_alias_are_refused_naming_the_field() -> None:
    errors = validate_job(a_spec("MirroredStrategy", PS))
    assert [e.field for e in errors] == ["spec.roles.ps"]
    assert "not MirroredStrategy" in errors[0].message  # named as written
    errors = validate_job(a_spec("ParameterServerStrategy", WORKERS))
    assert [e.field for e in errors] == ["spec.roles.ps"]
    assert "mode Async" in errors[0].message
    # TF's ParameterServerStrategy has no modes: choosing one is refused.
    errors = validate_job(a_spec("ParameterServerStrategy", PS, parameterServer={"mode": "Sync"}))
    assert [e.field for e in errors] == ["spec.strategy.parameterServer"]


@pytest.mark.parametrize(("alias", "roles", "target", "mode"), CASES)
def test_the_trainer_runs_the_target_of_an_alias_it_reads_as_written(
    alias: str, roles: dict[str, Any], target: str, mode: str | None
) -> None:
    # `python -m dtjob_trainer launch` reads a manifest with no operator in between.
    cfg = load_config(a_spec(alias, roles))
    assert (cfg.strategy.type, cfg.parameter_server.mode) == (target, mode or "Sync")
    if mode:  # TF's ParameterServerStrategy has no modes: dtjob_api's rule refuses one
        with pytest.raises(ConfigError, match=r"^strategy\.parameterServer: not allowed with"):
            load_config(a_spec(alias, roles, parameterServer={"mode": "Sync"}))
