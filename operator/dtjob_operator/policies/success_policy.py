"""Success policy: when is the job done, and what is left to stop.

The role that does the training decides: every worker for the data-parallel family and
the parameter-server strategy, every stage for the pipeline family. Parameter servers never
exit by themselves (they serve until told otherwise), so success stops them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dtjob_api.spec import DistributedTrainingJobSpec, StrategyType
from dtjob_operator.constants import REASON_ALL_STAGES_SUCCEEDED, REASON_ALL_WORKERS_SUCCEEDED
from dtjob_operator.envcontract import PIPELINE_STRATEGIES
from dtjob_operator.policies.pods import Pod, index_of, phase_of, role_of


@dataclass(frozen=True)
class SuccessVerdict:
    """The job succeeded."""

    reason: str
    message: str
    roles_to_stop: tuple[str, ...]
    """Roles whose still-running pods are to be deleted now (the parameter servers)."""


def deciding_role(strategy: StrategyType | str) -> str:
    """The role whose pods must all succeed: stage for ModelParallel, Pipeline and Hybrid,
    worker for the others."""
    return "stage" if StrategyType(strategy) in PIPELINE_STRATEGIES else "worker"


def judge_success(spec: DistributedTrainingJobSpec, pods: Iterable[Pod]) -> SuccessVerdict | None:
    """The verdict when every pod of the deciding role (by index, in the current gang,
    `pods`) has succeeded; None otherwise."""
    role = deciding_role(spec.strategy.type)
    role_spec = getattr(spec.roles, role)
    if role_spec is None:
        return None
    succeeded = {index_of(p) for p in pods if role_of(p) == role and phase_of(p) == "Succeeded"}
    if not set(range(role_spec.replicas)) <= succeeded:
        return None
    plural = "workers" if role == "worker" else "stages"
    reason = REASON_ALL_WORKERS_SUCCEEDED if role == "worker" else REASON_ALL_STAGES_SUCCEEDED
    stop = ("ps",) if StrategyType(spec.strategy.type) == StrategyType.PARAMETER_SERVER else ()
    return SuccessVerdict(
        reason=reason, message=f"all {role_spec.replicas} {plural} succeeded", roles_to_stop=stop
    )
