"""The rules of elastic jobs (roles.worker.minReplicas, runPolicy.elastic; docs/admission.md
"Elastic jobs"); rules.py adds these rows to RULES, so each is enforced as CEL in the CRD
and in Python by the operator, like every other rule."""

from __future__ import annotations

from dtjob_api.facts import BUNDLED_TRAINER, cel_is
from dtjob_api.rule import Rule
from dtjob_api.spec import StrategyType

# The strategies that train the same model at any worker count (the trainer weights uneven
# shards), or a custom command, with workers only.
_ELASTIC = (StrategyType.DATA_PARALLEL, StrategyType.FSDP, StrategyType.CPU_OFFLOAD)
_HAS_MIN = "has(self.roles.worker) && has(self.roles.worker.minReplicas)"

ELASTIC_RULES: tuple[Rule, ...] = (
    Rule(
        "roles.worker.minReplicas",
        _HAS_MIN, lambda f: f.has_min_replicas,
        f"({cel_is(*_ELASTIC)} || !({BUNDLED_TRAINER})) && !has(self.roles.ps) "
        "&& !has(self.roles.stage)",
        lambda f: (f.strategy in _ELASTIC or not f.bundled_trainer)
        and not f.has_ps and not f.has_stage,
        "elastic jobs are DataParallel, FSDP, CPUOffload or a custom trainer.command, with "
        "workers only: pipeline stages, parameter-server modes and tensor-parallel groups "
        "have a fixed shape, and Auto picks its strategy by the world size",
        "FieldValueForbidden",
    ),
    Rule(
        "roles.worker.minReplicas",
        _HAS_MIN, lambda f: f.has_min_replicas,
        "self.roles.worker.minReplicas <= self.roles.worker.replicas",
        lambda f: f.minReplicas <= f.workerReplicas,
        "must be at most replicas (the most workers the job runs with)",
        detail="{minReplicas} > {workerReplicas}",
    ),
    Rule(
        "runPolicy.elastic",
        "has(self.runPolicy) && has(self.runPolicy.elastic)",
        lambda f: f.has_elastic_policy,
        _HAS_MIN, lambda f: f.has_min_replicas,
        "only for an elastic job: set roles.worker.minReplicas",
        "FieldValueForbidden",
    ),
)  # fmt: skip
