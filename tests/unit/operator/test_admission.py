"""Admission, pure parts: quantities, placement, queue order, preemption and whole passes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from unit.operator.builders import T0, a_job, a_pod, at, iso

from dtjob_operator.admission.decide import decide
from dtjob_operator.admission.fit import Node, PodDemand, Quota, place, tolerates
from dtjob_operator.admission.preemption import select_victims, select_victims_in_a_domain
from dtjob_operator.admission.queue import in_queue_order, positions
from dtjob_operator.admission.resources import (
    CPU,
    GPU,
    MEMORY,
    PODS,
    format_amount,
    parse_quantity,
    pod_requests,
    quota_amounts,
)
from dtjob_operator.admission.snapshot import (
    JobView,
    Snapshot,
    build_snapshot,
    gang_pods,
    is_admitted,
    priority_of,
)
from dtjob_operator.constants import (
    REASON_INADMISSIBLE,
    REASON_PODS_READY_TIMEOUT,
    REASON_PREEMPTED,
    REASON_WAITING_FOR_ADMISSION,
)
from dtjob_operator.settings import OperatorSettings

# -- builders -------------------------------------------------------------------------------


def pod(gpus: int, **more: int) -> PodDemand:
    return PodDemand({GPU: gpus, PODS: 1, **more})


def node(name: str, gpus: int, free: int | None = None, **labels: str) -> Node:
    alloc = {GPU: gpus, CPU: 64000, PODS: 110}
    return Node(name, alloc, {**alloc, GPU: gpus if free is None else free}, labels)


def view(
    name: str,
    pods: int = 1,
    gpus: int = 4,
    *,
    ns: str = "a",
    priority: int = 0,
    created: float = 0,
    admitted: bool = False,
    started: bool = True,
    **fields: Any,
) -> JobView:
    gang = tuple(pod(gpus) for _ in range(pods))
    if admitted and started:
        fields.setdefault("held", tuple(("n1", dict(p.requests)) for p in gang))
    if admitted and not started:
        fields.setdefault("missing", gang)
    return JobView(
        uid=name,
        namespace=ns,
        name=name,
        priority=priority,
        created=iso(created),
        gang=gang,
        admitted=admitted,
        **fields,
    )


def snapshot(
    jobs: Sequence[JobView],
    nodes: Sequence[Node] = (),
    quotas: dict[str, tuple[int, int]] | None = None,
) -> Snapshot:
    """quotas: namespace -> (hard GPUs, free GPUs)."""
    folded = {ns: Quota({GPU: h}, {GPU: f}) for ns, (h, f) in (quotas or {}).items()}
    return Snapshot(
        jobs=list(jobs),
        quotas=folded,
        nodes=list(nodes) or [node(f"n{i}", 8) for i in range(4)],
        now=T0,
    )


# -- resources ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        ("2", CPU, 2000),
        ("500m", CPU, 500),
        ("0.1", CPU, 100),
        ("1Gi", MEMORY, 2**30),
        ("1G", MEMORY, 10**9),
        ("1.5Gi", MEMORY, 3 * 2**29),
        (8, GPU, 8),
        ("16", GPU, 16),
        ("1e3", PODS, 1000),
    ],
)
def test_parse_quantity(value: object, resource: str, expected: int) -> None:
    assert parse_quantity(value, resource) == expected


def test_parse_quantity_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        parse_quantity("lots", GPU)


@pytest.mark.parametrize(
    ("amount", "resource", "text"),
    [(2000, CPU, "2"), (500, CPU, "500m"), (2**34, MEMORY, "16Gi"), (7, GPU, "7")],
)
def test_format_amount(amount: int, resource: str, text: str) -> None:
    assert format_amount(amount, resource) == text


def test_pod_requests_sum_containers_default_to_limits_and_respect_init() -> None:
    spec = {
        "containers": [
            {"resources": {"limits": {GPU: "2"}, "requests": {"cpu": "1"}}},
            {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
    }
    assert pod_requests(spec) == {GPU: 2, CPU: 4000, MEMORY: 2**30, PODS: 1}


def test_pod_requests_add_native_sidecars_to_containers_and_to_later_init_containers() -> None:
    sidecar = {"restartPolicy": "Always", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "2"}, "limits": {GPU: "8"}}}],
        "initContainers": [
            {"resources": {"requests": {"cpu": "2500m"}}},  # runs alone: 2.5 cpu
            sidecar,  # keeps running beside everything after it
            {"resources": {"requests": {"cpu": "2500m", "memory": "512Mi"}}},  # 3.5 with it
        ],
    }
    # Steady state: 2 + 1 cpu, 1Gi; the last init container peaks at 2.5 + 1 = 3.5 cpu.
    assert pod_requests(spec) == {GPU: 8, CPU: 3500, MEMORY: 2**30 + 2**29, PODS: 1}
    spec["initContainers"] = [sidecar]
    assert pod_requests(spec) == {GPU: 8, CPU: 3000, MEMORY: 2**30, PODS: 1}


def test_quota_amounts_maps_keys_and_takes_the_tighter_cpu() -> None:
    hard = {"requests.nvidia.com/gpu": "16", "cpu": "10", "requests.cpu": "8",
            "count/pods": "20", "services": "5", "limits.memory": "1Ti"}  # fmt: skip
    assert quota_amounts(hard) == {GPU: 16, CPU: 8000, PODS: 20}


# -- placement ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gang", "free", "fits"),
    [
        ([4], [2, 2], False),  # a sum of free GPUs is not a placement
        ([4], [2, 4], True),
        ([4, 4], [8, 0], True),
        ([4, 4, 4], [8, 2, 2], False),
        ([6, 2, 2, 6], [8, 8], True),  # decreasing order finds it
        ([2, 2], [], False),
    ],
)
def test_place_first_fit_decreasing(gang: list[int], free: list[int], fits: bool) -> None:
    nodes = [node(f"n{i}", 8, f) for i, f in enumerate(free)]
    before = [n.free[GPU] for n in nodes]
    assert place([pod(g) for g in gang], nodes) is fits
    after = [n.free[GPU] for n in nodes]
    assert sum(before) - sum(after) == (sum(gang) if fits else 0)


def test_place_honours_node_selector_and_taints() -> None:
    tainted = Node(
        "t", {GPU: 8}, {GPU: 8}, {"pool": "x"}, ({"key": "gpu", "effect": "NoSchedule"},)
    )
    plain = node("p", 8)
    wants_x = PodDemand({GPU: 8}, node_selector={"pool": "x"})
    assert not place([wants_x], [tainted, plain], commit=False)
    tolerant = PodDemand({GPU: 8}, {"pool": "x"}, ({"key": "gpu", "operator": "Exists"},))
    assert place([tolerant], [tainted, plain], commit=False)


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"operator": "Exists"}, True),
        ({"key": "gpu", "operator": "Equal", "value": "yes"}, True),
        ({"key": "gpu", "operator": "Equal", "value": "no"}, False),
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerates(toleration: dict[str, str], ok: bool) -> None:
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    assert tolerates([toleration], taint) is ok


# -- queue ----------------------------------------------------------------------------------


def test_queue_order_is_priority_then_creation_then_name() -> None:
    jobs = [
        view("late-high", priority=10, created=30),
        view("old", created=0),
        view("b-same-second", created=5),
        view("a-same-second", created=5),
        view("early-high", priority=10, created=20),
    ]
    order = [j.name for j in in_queue_order(jobs)]
    assert order == ["early-high", "late-high", "old", "a-same-second", "b-same-second"]


def test_positions_count_per_namespace() -> None:
    jobs = [view("x", ns="a"), view("y", ns="b"), view("z", ns="a")]
    assert positions(jobs) == {"x": 1, "y": 1, "z": 2}


# -- whole passes ---------------------------------------------------------------------------


def verdicts(jobs: Sequence[JobView], **kw: Any) -> dict[str, tuple[bool, str, int | None]]:
    preemption = kw.pop("preemption", True)
    result = decide(snapshot(jobs, **kw), preemption=preemption)
    return {uid: (v.admit, v.reason, v.position) for uid, v in result.verdicts.items()}


def test_admits_in_order_until_the_quota_is_full() -> None:
    jobs = [view(f"j{i}", created=i) for i in range(6)]
    got = verdicts(jobs, quotas={"a": (16, 16)})
    assert [got[f"j{i}"][0] for i in range(6)] == [True] * 4 + [False] * 2
    assert got["j4"][2] == 1 and got["j5"][2] == 2


def test_quota_message_has_the_numbers() -> None:
    result = decide(snapshot([view("big", 2, 4)], quotas={"a": (16, 4)}), preemption=False)
    message = result.verdicts["big"].message
    assert "needs 8 nvidia.com/gpu, namespace a has 4 free of 16" in message
    assert message.startswith("position 1 in the queue of namespace a")


def test_reserved_gangs_count_against_the_quota() -> None:
    # j0 is admitted but none of its pods exist yet: its 12 GPUs are still spoken for.
    jobs = [view("j0", 3, 4, admitted=True, started=False), view("j1", 2, 4, created=1)]
    assert verdicts(jobs, quotas={"a": (16, 16)})["j1"][0] is False
    assert verdicts(jobs, quotas={"a": (20, 20)})["j1"][0] is True


def test_larger_than_quota_never_fits_and_does_not_block() -> None:
    jobs = [view("huge", 5, 4, created=0), view("small", created=1)]
    got = verdicts(jobs, quotas={"a": (16, 16)})
    assert got["huge"][:2] == (False, REASON_INADMISSIBLE)
    assert got["small"][0] is True


def test_larger_than_the_cluster_never_fits_and_does_not_block() -> None:
    jobs = [view("huge", 1, 16, created=0), view("small", created=1)]
    got = verdicts(jobs, nodes=[node("n0", 8), node("n1", 8)])
    assert got["huge"][:2] == (False, REASON_INADMISSIBLE)
    assert got["small"][0] is True


def test_a_job_that_fits_later_blocks_its_namespace_only() -> None:
    jobs = [
        view("head", 2, 8, created=0),
        view("behind", 1, 1, created=1),
        view("other-ns", 1, 1, ns="b", created=2),
    ]
    nodes = [node("n0", 8, 4), node("n1", 8, 4)]
    got = verdicts(jobs, nodes=nodes, preemption=False)
    assert got["head"][:2] == (False, REASON_WAITING_FOR_ADMISSION)
    assert got["behind"][0] is False
    assert got["other-ns"][0] is True


def test_fragmented_nodes_are_not_a_placement() -> None:
    got = verdicts([view("j", 1, 4)], nodes=[node("n0", 8, 2), node("n1", 8, 2)])
    assert got["j"][:2] == (False, REASON_WAITING_FOR_ADMISSION)


def test_requeue_backoff_waits_without_blocking() -> None:
    jobs = [view("timed-out", not_before=at(30), created=0), view("next", created=1)]
    got = verdicts(jobs)
    assert got["timed-out"][0] is False and got["next"][0] is True
    # While it backs off it keeps the reason it was released for.
    assert got["timed-out"][1] == REASON_PODS_READY_TIMEOUT


def test_higher_priority_preempts_the_newest_lowest_priority_job() -> None:
    running = [
        view("old-low", 1, 8, priority=1, created=0, admitted=True),
        view("new-low", 1, 8, priority=1, created=5, admitted=True),
        view("mid", 1, 8, priority=5, created=1, admitted=True),
    ]
    high = view("high", 1, 8, priority=10, created=9)
    result = decide(snapshot([*running, high], quotas={"a": (24, 0)}), preemption=True)
    assert list(result.preempt) == ["new-low"]
    assert result.preempt["new-low"].reason == REASON_PREEMPTED
    assert not result.verdicts["high"].admit
    assert "preempting lower-priority job(s) new-low" in result.verdicts["high"].message


@pytest.mark.parametrize(
    ("preemption", "can_preempt", "victim_priority", "releasing"),
    [
        (False, True, 1, False),  # turned off
        (True, False, 1, False),  # PriorityClass preemptionPolicy: Never
        (True, True, 10, False),  # equal priority is never preempted
        (True, True, 1, True),  # earlier victims still stopping
    ],
)
def test_no_preemption_when(
    preemption: bool, can_preempt: bool, victim_priority: int, releasing: bool
) -> None:
    jobs = [
        view("low", 1, 8, priority=victim_priority, admitted=True),
        view("high", 1, 8, priority=10, created=9, can_preempt=can_preempt),
    ]
    if releasing:
        jobs.append(view("stopping", 1, 1, created=8, held=(("n1", {GPU: 1}),)))
    result = decide(snapshot(jobs, quotas={"a": (8, 0)}), preemption=preemption)
    assert result.preempt == {}


def test_preemption_is_per_namespace() -> None:
    jobs = [
        view("low-b", 1, 8, ns="b", priority=1, admitted=True),
        view("high-a", 1, 8, priority=10, created=9),
    ]
    result = decide(snapshot(jobs, quotas={"a": (8, 0)}), preemption=True)
    assert result.preempt == {}


def test_select_victims_gives_reprieves() -> None:
    low = view("low", 1, 2, priority=1, created=9, admitted=True)
    big = view("big", 1, 8, priority=2, created=0, admitted=True)
    high = view("high", 1, 8, priority=10)

    def fits(victims: Sequence[JobView]) -> bool:
        return sum(v.gang[0].requests[GPU] for v in victims) >= 8

    assert select_victims(high, [low, big], fits) == [big]
    assert select_victims(high, [low], fits) is None


def test_victims_are_chosen_inside_one_domain() -> None:
    """A gang that needs 8 GPUs inside one rack. Rack 1 holds one job of 8 GPUs; rack 2
    two newer jobs of 4. Newest first, the plain order stops two jobs; domain by domain,
    one job frees a whole rack."""
    a = view("a", 1, 8, priority=1, created=1, admitted=True, held=(("r1-n", {GPU: 8}),))
    b = view("b", 1, 4, priority=1, created=2, admitted=True, held=(("r2-n", {GPU: 4}),))
    d = view("d", 1, 4, priority=1, created=3, admitted=True, held=(("r2-n", {GPU: 4}),))
    high = view("high", 1, 8, priority=10)
    racks = {"r1": frozenset({"r1-n"}), "r2": frozenset({"r2-n"})}

    def fits(victims: Sequence[JobView]) -> bool:  # 8 GPUs freed on one rack's node
        freed: dict[str, int] = {}
        for v in victims:
            for node, requests in v.held:
                freed[str(node)] = freed.get(str(node), 0) + requests[GPU]
        return max(freed.values(), default=0) >= 8

    assert select_victims(high, [a, b, d], fits) == [d, b]
    assert select_victims_in_a_domain(high, [a, b, d], racks, fits) == [a]
    assert select_victims_in_a_domain(high, [b], racks, fits) is None  # 4 GPUs: not enough


# -- snapshot from API objects --------------------------------------------------------------


def test_snapshot_from_api_objects() -> None:
    settings = OperatorSettings()
    job = a_job("j", "a").with_workers(2, gpus=4).with_status(restarts=0)
    running = a_pod(job, "worker", 0).running().obj()
    running["spec"] = {"nodeName": "n0", "containers": [{"resources": {"limits": {GPU: "4"}}}]}
    nodes = [
        {
            "metadata": {"name": name},
            "spec": spec,
            "status": {
                "allocatable": {GPU: "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": ready}],
            },
        }
        for name, spec, ready in [
            ("n0", {}, "True"),
            ("n1", {}, "False"),
            ("n2", {"unschedulable": True}, "True"),
        ]
    ]
    quota = {
        "metadata": {"namespace": "a"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "16"}},
        "status": {"used": {"requests.nvidia.com/gpu": "0"}},  # lags the pod: ours wins
    }
    snap = build_snapshot(
        jobs=[job.obj()],
        pods=[running],
        nodes=nodes,
        quotas=[quota],
        priority_classes=[],
        gang_of=lambda j: gang_pods(j, settings),
        admitted=is_admitted,
        not_before=lambda j: None,
        now=T0,
    )
    assert [n.name for n in snap.nodes] == ["n0"] and snap.nodes[0].free[GPU] == 4
    assert snap.quotas["a"].room[GPU] == 12
    (v,) = snap.jobs
    assert len(v.gang) == 2 and len(v.missing) == 1 and v.unscheduled == ()
    assert v.held == (("n0", {GPU: 4, PODS: 1}),)


def test_snapshot_skips_finished_and_suspended_jobs() -> None:
    settings = OperatorSettings()
    done = a_job("done").with_workers(1, gpus=1).with_status(phase="Succeeded").obj()
    held = a_job("held").with_workers(1, gpus=1).suspended().obj()
    snap = build_snapshot(
        jobs=[done, held], pods=[], nodes=[], quotas=[], priority_classes=[],
        gang_of=lambda j: gang_pods(j, settings), admitted=is_admitted,
        not_before=lambda j: None, now=T0,
    )  # fmt: skip
    assert snap.jobs == []


def test_priority_of_uses_classes_and_the_global_default() -> None:
    classes = [
        {"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"},
        {"metadata": {"name": "default"}, "value": 5, "globalDefault": True},
    ]
    assert priority_of(["high"], classes) == (1000, False)
    assert priority_of([None], classes) == (5, True)
    assert priority_of(["unknown"], []) == (0, True)


def test_timestamps_sort_as_strings() -> None:
    assert iso(1) < iso(10) and at(1) + timedelta(seconds=9) == at(10)


def test_book_forget_drops_entries_of_earlier_passes_only() -> None:
    from dtjob_operator.admission.book import AdmissionBook
    from dtjob_operator.admission.decide import Decisions, Verdict
    from dtjob_operator.constants import REASON_ADMITTED

    book = AdmissionBook()
    job = {"metadata": {"uid": "u"}, "status": {}}
    decisions = Decisions(verdicts={"u": Verdict(True, REASON_ADMITTED, "fits")})
    early = book.epoch()
    book.forget("u")
    assert book.record(decisions, early) == [] and not book.admitted(job)
    assert book.record(decisions, book.epoch()) == ["u"] and book.admitted(job)


def test_book_clear_drops_every_verdict_and_passes_begun_before_it() -> None:
    from dtjob_operator.admission.book import AdmissionBook
    from dtjob_operator.admission.decide import Decisions, Verdict
    from dtjob_operator.constants import REASON_ADMITTED

    book = AdmissionBook()
    job = {"metadata": {"uid": "u"}, "status": {}}
    decisions = Decisions(verdicts={"u": Verdict(True, REASON_ADMITTED, "fits")})
    assert book.record(decisions, book.epoch()) == ["u"] and book.admitted(job)
    early = book.epoch()
    book.clear()  # leadership lost
    assert not book.admitted(job) and len(book) == 0
    assert book.record(decisions, early) == [] and not book.admitted(job)
    assert book.record(decisions, book.epoch()) == ["u"]
