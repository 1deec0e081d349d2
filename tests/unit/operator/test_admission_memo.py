"""What the admission pass remembers between passes (admission/view_memo.ViewMemo) and its
shortcut for kept reservations (fit.place_on): the same answers as working it all out again,
which is what the burst benchmark's CPU figure rests on."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from unit.operator.builders import T0, a_job, a_pod
from unit.operator.test_admission import node

from dtjob_operator.admission.fit import PodDemand, place, place_on
from dtjob_operator.admission.resources import GPU, PODS
from dtjob_operator.admission.snapshot import build_snapshot, gang_pods, is_admitted
from dtjob_operator.admission.view_memo import ViewMemo
from dtjob_operator.settings import OperatorSettings

SETTINGS = OperatorSettings()


GANGS: dict[object, Any] = {}


def _gang(job: dict[str, Any]) -> Any:
    """One gang list per job version, as the controller's own memo hands it out."""
    key = (job["metadata"]["uid"], job["metadata"].get("resourceVersion"))
    return GANGS.setdefault(key, gang_pods(job, SETTINGS))


def _snapshot(jobs: list[dict[str, Any]], pods: list[dict[str, Any]], memo: ViewMemo) -> Any:
    return build_snapshot(
        jobs=jobs, pods=pods, nodes=[], quotas=[], priority_classes=[],
        gang_of=_gang, admitted=is_admitted,
        not_before=lambda j: None, now=T0, memo=memo,
    )  # fmt: skip


def test_a_view_is_made_again_only_when_its_job_or_its_pods_change() -> None:
    builder = a_job().with_workers(2)
    job = builder.obj()
    job["metadata"]["resourceVersion"] = "1"
    pod = a_pod(builder, "worker", 0).running().obj()
    pod["metadata"]["resourceVersion"] = "10"
    memo = ViewMemo()
    first = _snapshot([job], [pod], memo).jobs[0]
    assert _snapshot([job], [pod], memo).jobs[0] is first  # nothing changed: kept
    pod = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "11"}}
    again = _snapshot([job], [pod], memo).jobs[0]
    assert again is not first and again == first  # made again, to the same answer
    job = {**job, "metadata": {**job["metadata"], "resourceVersion": "2"},
           "spec": {**job["spec"], "suspend": True}}  # fmt: skip
    assert _snapshot([job], [pod], memo).jobs == []  # a suspended job has no view


def test_a_kept_reservation_is_checked_as_placing_each_pod_on_its_node_would() -> None:
    rng = random.Random(36)
    for _ in range(300):
        free = [rng.choice([0, 2, 4, 8]) for _ in range(3)]
        nodes = [node(f"n{i}", 8, free=f) for i, f in enumerate(free)]
        pods = [PodDemand({GPU: rng.choice([1, 2, 4]), PODS: 1}) for _ in range(rng.randint(1, 4))]
        names = [rng.choice(["n0", "n1", "n2", "gone"]) for _ in pods]
        pinned = [replace(p, node_name=n) for p, n in zip(pods, names, strict=True)]
        expected = place(pinned, nodes) if "gone" not in names else False
        want = [dict(n.free) for n in nodes]
        nodes = [node(f"n{i}", 8, free=f) for i, f in enumerate(free)]
        got = place_on(pods, names, {n.name: n for n in nodes})
        assert (got, [dict(n.free) for n in nodes]) == (expected, want), (free, pods, names)
