"""Elastic jobs in the admission pass (issue 29): admitted at the most pods in
[minReplicas, replicas] that fit the quota and the nodes now, as a gang of its first ranks;
a minimum that does not fit waits, or is never admissible, with the minimum's numbers."""

from __future__ import annotations

from unit.operator.test_admission import node, snapshot
from unit.operator.test_admission_topology import named

from dtjob_operator.admission.decide import decide
from dtjob_operator.admission.snapshot import JobView, elastic_min
from dtjob_operator.constants import REASON_INADMISSIBLE, REASON_WAITING_FOR_ADMISSION


def elastic(name: str, pods: int, least: int, gpus: int = 4, **fields: object) -> JobView:
    return named(name, pods, gpus, elastic_min=least, **fields)


def test_admitted_at_the_largest_size_the_nodes_hold() -> None:
    nodes = [node("n0", 8), node("n1", 8, 4), node("n2", 8, 0), node("n3", 8, 0)]
    result = decide(snapshot([elastic("e", 4, 1)], nodes), preemption=False)
    assert result.verdicts["e"].admit and result.sizes["e"] == 3
    assert sorted(result.placements["e"]) == ["e-worker-0", "e-worker-1", "e-worker-2"]


def test_admitted_at_the_largest_size_the_quota_allows() -> None:
    result = decide(snapshot([elastic("e", 4, 1)], quotas={"a": (16, 8)}), preemption=False)
    assert result.verdicts["e"].admit and result.sizes["e"] == 2


def test_a_minimum_that_does_not_fit_now_waits_with_its_numbers() -> None:
    nodes = [node("n0", 8, 4), node("n1", 8, 0)]
    verdict = decide(snapshot([elastic("e", 4, 2)], nodes), preemption=False).verdicts["e"]
    assert not verdict.admit and verdict.reason == REASON_WAITING_FOR_ADMISSION
    assert "needs 2 pods of 4 nvidia.com/gpu" in verdict.message


def test_a_minimum_that_never_fits_is_inadmissible() -> None:
    verdict = decide(
        snapshot([elastic("e", 8, 5)], quotas={"a": (16, 16)}), preemption=False
    ).verdicts["e"]
    assert not verdict.admit and verdict.reason == REASON_INADMISSIBLE


def test_a_fixed_job_is_admitted_whole_or_not_at_all() -> None:
    nodes = [node("n0", 8), node("n1", 8, 4)]
    result = decide(snapshot([named("f", 4, 4)], nodes), preemption=False)
    assert not result.verdicts["f"].admit and "f" not in result.sizes


def test_the_minimum_is_read_from_a_workers_only_spec() -> None:
    def job(roles: dict[str, object]) -> dict[str, object]:
        return {"spec": {"roles": roles}}

    assert elastic_min(job({"worker": {"replicas": 4, "minReplicas": 2}}), 4) == 2
    assert elastic_min(job({"worker": {"replicas": 4, "minReplicas": 4}}), 4) is None
    assert elastic_min(job({"worker": {"minReplicas": 2}, "ps": {}}), 4) is None
    assert elastic_min(job({"worker": {"replicas": 4}}), 4) is None
