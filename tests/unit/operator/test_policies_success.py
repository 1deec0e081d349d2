"""Success policy: the deciding role per strategy, and what success stops."""

from __future__ import annotations

import pytest
from unit.operator.builders import JobBuilder, PodBuilder, a_job, a_pod, pods

from dtjob_operator.policies.success_policy import deciding_role, judge_success

DECIDING = [
    ("DataParallel", "worker"),
    ("FSDP", "worker"),
    ("CPUOffload", "worker"),
    ("Auto", "worker"),
    ("ParameterServer", "worker"),
    ("ModelParallel", "stage"),
    ("Pipeline", "stage"),
    ("Hybrid", "stage"),
]


@pytest.mark.parametrize(("strategy", "role"), DECIDING)
def test_deciding_role_per_strategy(strategy: str, role: str) -> None:
    assert deciding_role(strategy) == role


DDP = a_job().with_strategy("DataParallel").with_workers(2)
PS = a_job().with_strategy("ParameterServer").with_workers(2).with_ps(1)
PIPE = a_job().with_strategy("Pipeline").with_stages(2)


def w(job: JobBuilder, index: int) -> PodBuilder:
    return a_pod(job, "worker", index)


CASES = [
    (
        "ddp all succeeded",
        DDP,
        [w(DDP, 0).succeeded(), w(DDP, 1).succeeded()],
        "AllWorkersSucceeded",
    ),
    ("ddp one still running", DDP, [w(DDP, 0).succeeded(), w(DDP, 1).running()], None),
    ("ddp a pod missing", DDP, [w(DDP, 0).succeeded()], None),
    ("ddp one failed", DDP, [w(DDP, 0).succeeded(), w(DDP, 1).failed(1)], None),
    (
        "ps: workers done, server still serving",
        PS,
        [w(PS, 0).succeeded(), w(PS, 1).succeeded(), a_pod(PS, "ps", 0).running().ready()],
        "AllWorkersSucceeded",
    ),
    (
        "pipeline: all stages",
        PIPE,
        [a_pod(PIPE, "stage", 0).succeeded(), a_pod(PIPE, "stage", 1).succeeded()],
        "AllStagesSucceeded",
    ),
    (
        "pipeline: last stage running",
        PIPE,
        [a_pod(PIPE, "stage", 0).succeeded(), a_pod(PIPE, "stage", 1).running()],
        None,
    ),
]


@pytest.mark.parametrize(
    ("job", "observed", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_success_per_strategy(
    job: JobBuilder, observed: list[PodBuilder], reason: str | None
) -> None:
    verdict = judge_success(job.job().spec, pods(*observed))
    assert (verdict.reason if verdict else None) == reason


def test_parameter_server_success_stops_the_servers() -> None:
    observed = pods(w(PS, 0).succeeded(), w(PS, 1).succeeded(), a_pod(PS, "ps", 0).running())
    verdict = judge_success(PS.job().spec, observed)
    assert verdict is not None
    assert verdict.roles_to_stop == ("ps",)
    assert verdict.message == "all 2 workers succeeded"


def test_data_parallel_success_stops_nothing() -> None:
    verdict = judge_success(DDP.job().spec, pods(w(DDP, 0).succeeded(), w(DDP, 1).succeeded()))
    assert verdict is not None and verdict.roles_to_stop == ()
