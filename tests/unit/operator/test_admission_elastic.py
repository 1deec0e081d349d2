"""Elastic jobs in the admission pass (issue 29): admitted at the most pods in
[minReplicas, replicas] that fit the quota and the nodes now, as a gang of its first ranks;
a minimum that does not fit waits, or is never admissible, with the minimum's numbers."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from unit.operator.builders import a_job, at, iso
from unit.operator.test_admission import GPU, T0, node, snapshot
from unit.operator.test_admission_topology import named

from dtjob_operator.admission.decide import decide
from dtjob_operator.admission.snapshot import (
    JobView,
    build_snapshot,
    elastic_min,
    gang_pods,
    is_admitted,
)
from dtjob_operator.constants import REASON_INADMISSIBLE, REASON_WAITING_FOR_ADMISSION
from dtjob_operator.settings import OperatorSettings


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


def running(name: str = "e", pods: int = 2, most: int = 4, **fields: object) -> JobView:
    """An admitted elastic job of `pods` x 4 GPUs on n0 (full), free to resize since 1 h."""
    held = tuple(("n0", {GPU: 4}) for _ in range(pods))
    fields.setdefault("resizable_at", T0 - timedelta(hours=1))
    return named(name, pods, 4, admitted=True, held=held, elastic_max=most, cooldown=600.0,
                 **fields)  # type: ignore[arg-type]  # fmt: skip


NODES = [node("n0", 8, 0), node("n1", 8)]


def test_a_running_elastic_job_grows_once_room_stayed_free_for_its_cooldown() -> None:
    first = decide(snapshot([running()], NODES), preemption=False)
    assert first.growable == {"e": 4} and first.resize == {}  # room seen now: not yet
    later = replace(snapshot([running()], NODES), growable_since={"e": T0 - timedelta(seconds=601)})
    grown = decide(later, preemption=False)
    assert grown.resize == {"e": (4, "grew from 2 to 4 workers into free capacity")}


def test_no_growth_while_its_namespace_has_a_job_waiting_or_before_its_cooldown() -> None:
    since = {"e": T0 - timedelta(hours=1)}
    nodes = [*NODES, node("n2", 8, 0)]
    waiting = named("w", 2, 8, created=5)  # fits the cluster, not what is free now
    busy = replace(snapshot([running(), waiting], nodes), growable_since=since)
    assert decide(busy, preemption=False).growable == {}
    never = named("w", 4, 8, created=5)  # 32 GPUs: never admissible, it blocks nothing
    idle = replace(snapshot([running(), never], nodes), growable_since=since)
    assert decide(idle, preemption=False).growable == {"e": 4}
    recent = running(resizable_at=T0 + timedelta(seconds=30))  # resized 9.5 min ago
    early = decide(replace(snapshot([recent], NODES), growable_since=since), preemption=False)
    assert early.growable == {"e": 4} and early.resize == {}


def test_growth_stops_at_what_fits() -> None:
    nodes = [node("n0", 8, 0), node("n1", 8, 4)]
    since = {"e": T0 - timedelta(hours=1)}
    grown = decide(replace(snapshot([running()], nodes), growable_since=since), preemption=False)
    assert grown.resize == {"e": (3, "grew from 2 to 3 workers into free capacity")}


def test_preemption_shrinks_an_elastic_job_to_its_minimum_before_stopping_anyone() -> None:
    """`e` (priority 0) runs 4 x 4 GPUs on n0 and n1, minimum 2; `fixed` (priority 0) runs
    2 x 4 on n2. An urgent 2 x 4 job needs one node's room: shrinking `e` to 2 frees n1,
    and nobody is stopped whole."""
    nodes = [node("n0", 8, 0), node("n1", 8, 0), node("n2", 8, 0)]
    e = named("e", 4, 4, admitted=True, elastic_min=2, created=1,
              held=(("n0", {GPU: 4}),) * 2 + (("n1", {GPU: 4}),) * 2,
              pod_nodes=("n0", "n0", "n1", "n1"))  # fmt: skip
    fixed = named("fixed", 2, 4, admitted=True, created=2, held=(("n2", {GPU: 4}),) * 2)
    urgent = named("urgent", 2, 4, priority=10, created=3)
    result = decide(snapshot([e, fixed, urgent], nodes), preemption=True)
    assert result.preempt == {}
    assert result.resize == {"e": (2, "shrunk from 4 to 2 workers for higher-priority job urgent")}
    assert "shrinking lower-priority elastic job(s) e" in result.verdicts["urgent"].message
    # Shrinking alone is not enough for 4 pods: `fixed` is stopped whole and `e` shrunk
    # (stopping `e` whole would have freed as much, and lost all its work).
    bigger = named("urgent", 4, 4, priority=10, created=3)
    result = decide(snapshot([e, fixed, bigger], nodes), preemption=True)
    assert set(result.preempt) == {"fixed"} and result.resize["e"][0] == 2


def test_an_elastic_job_is_shrunk_only_as_far_as_the_preemptor_needs() -> None:
    """Issue 35, measured on 4 nodes x 8 GPUs: `e` runs 4 x 8 GPUs (minimum 1), one worker
    a node; an urgent 2 x 8 job needs two nodes. Shrinking `e` to 2 is enough: one
    checkpoint-restart of 4 -> 2, not 4 -> 1 and a growth back to 2 after the cooldown."""
    nodes = [node(f"n{i}", 8, 0) for i in range(4)]
    on = tuple(f"n{i}" for i in range(4))
    e = named("e", 4, 8, admitted=True, elastic_min=1, created=1,
              held=tuple((n, {GPU: 8}) for n in on), pod_nodes=on)  # fmt: skip
    urgent = named("urgent", 2, 8, priority=10, created=3)
    result = decide(snapshot([e, urgent], nodes), preemption=True)
    assert result.preempt == {}
    assert result.resize == {"e": (2, "shrunk from 4 to 2 workers for higher-priority job urgent")}
    # With a job stopped whole as well, the shrink is still the least that makes room.
    fixed = named("fixed", 1, 8, admitted=True, created=2, held=(("n4", {GPU: 8}),))
    big = named("urgent", 4, 8, priority=10, created=3)
    wider = [*nodes, node("n4", 8, 0)]
    result = decide(snapshot([e, fixed, big], wider), preemption=True)
    assert set(result.preempt) == {"fixed"} and result.resize["e"][0] == 1
    result = decide(snapshot([e, fixed, named("urgent", 3, 8, priority=10, created=3)],
                             wider), preemption=True)  # fmt: skip
    assert result.preempt == {} and result.resize["e"][0] == 1


def test_a_shrink_in_flight_is_kept_while_the_gang_drains() -> None:
    """The shrink of `e` to 2 was decided; its pods are going, rank 2's first (n2 free).
    Decided afresh, 3 would now do (n2 and rank 3's n3): the resize under way would be
    replaced by another, one more checkpoint-restart. The pass keeps the size decided."""
    nodes = [node(f"n{i}", 8, 8 if i == 2 else 0) for i in range(4)]
    left = ("n0", "n1", "n3")
    e = named("e", 4, 8, admitted=True, elastic_min=1, created=1,
              held=tuple((n, {GPU: 8}) for n in left),
              pod_nodes=("n0", "n1", None, "n3"))  # fmt: skip
    urgent = named("urgent", 2, 8, priority=10, created=3)
    fresh = decide(snapshot([e, urgent], nodes), preemption=True)
    assert fresh.resize["e"][0] == 3
    kept = decide(replace(snapshot([e, urgent], nodes), resizing={"e": 2}), preemption=True)
    assert kept.resize == {"e": (2, "shrunk from 4 to 2 workers for higher-priority job urgent")}
    # A size the gang already has (a finished resize) or one that no longer makes room
    # is decided afresh.
    done = decide(replace(snapshot([e, urgent], nodes), resizing={"e": 4}), preemption=True)
    assert done.resize["e"][0] == 3


def test_a_running_job_is_viewed_with_its_bounds_until_it_is_out_of_resizes() -> None:
    """From the job object: a job at 3 of 4 workers (minimum 2) may grow to 4 and be shrunk
    to 2, not before its last resize + the cooldown; once it has had maxResizes resizes
    its size stays (it can neither grow nor be shrunk, only stopped whole). Without a
    checkpoint claim it does not grow (it would start over), but may be shrunk."""
    settings = OperatorSettings()

    def view(resizes: int, claim: str | None = "ckpt") -> JobView:
        job = a_job("e").with_workers(4, gpus=4, minReplicas=2).with_checkpoint(claimName=claim)
        job = job.with_run_policy(elastic={"cooldownSeconds": 60, "maxResizes": 2})
        said = {"replicas": 3, "resizes": resizes, "lastResizeTime": iso(100)}
        obj = job.with_status(phase="Running", startTime=iso(0), elastic=said).obj()
        (v,) = build_snapshot(
            jobs=[obj], pods=[], nodes=[], quotas=[], priority_classes=[],
            gang_of=lambda j: gang_pods(j, settings), admitted=is_admitted,
            not_before=lambda j: None, now=T0,
        ).jobs  # fmt: skip
        return v

    v = view(1)
    assert (len(v.gang), v.elastic_min, v.elastic_max) == (3, 2, 4)
    assert v.resizable_at == at(160) and v.cooldown == 60.0
    v = view(2)
    assert (len(v.gang), v.elastic_min, v.elastic_max, v.resizable_at) == (3, None, None, None)
    v = view(1, claim=None)
    assert (len(v.gang), v.elastic_min, v.elastic_max) == (3, 2, None)
