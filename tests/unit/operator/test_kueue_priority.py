"""A job's Workload priority follows its kueue.x-k8s.io/priority-class label as Kueue 0.19's
integrations keep theirs (kueue/priority.py), with what Kueue's Workload CRD refuses while
the Workload holds quota left unchanged and said; the real Kueue's side is in
integration/kueue/test_kueue_priority.py."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.builders import a_job

from dtjob_operator.builders import Job
from dtjob_operator.kubehttp import ApiException
from dtjob_operator.kueue.priority import PriorityFollower, follows_label, priority_change
from dtjob_operator.kueue.workload import PRIORITY_LABEL, Priority

HIGH = Priority("WorkloadPriorityClass", "high", 1000)
LOW_REF = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "low"}
PC_REF = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "batch"}


def workload(ref: dict[str, str] | None, reserved: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"priority": 10} if ref else {}
    if ref:
        spec["priorityClassRef"] = ref
    conditions = [{"type": "QuotaReserved", "status": "True"}] if reserved else []
    return {
        "metadata": {"name": "wl", "namespace": "ns", "resourceVersion": "7"},
        "spec": spec,
        "status": {"conditions": conditions},
    }


@pytest.mark.parametrize(
    ("ref", "reserved", "label", "follows"),
    [
        (LOW_REF, False, "low", False),  # in step
        (LOW_REF, False, "high", True),  # relabelled
        (LOW_REF, True, "high", True),  # also while admitted: a name change is allowed
        (LOW_REF, False, "", True),  # label removed: derived afresh
        (None, False, "high", True),  # label added to a Workload without priority
        (None, True, "high", False),  # ... not once it holds quota (CEL: no ref added)
        (None, False, "", False),
        (PC_REF, False, "high", False),  # the pods' PriorityClass: not the label's
    ],
)
def test_which_workloads_follow_the_label(
    ref: dict[str, str] | None, reserved: bool, label: str, follows: bool
) -> None:
    assert follows_label(workload(ref, reserved), label) is follows


def test_a_relabelled_job_gets_the_new_class_and_value() -> None:
    change = priority_change(workload(LOW_REF), {PRIORITY_LABEL: "high"}, HIGH)
    assert change.patch == {
        "metadata": {"resourceVersion": "7"},
        "spec": {"priorityClassRef": HIGH.ref(), "priority": 1000},
    }
    assert change.reason == "UpdatedWorkload"
    assert change.message == (
        "Updated workload priority class: ns/wl now has WorkloadPriorityClass high (priority 1000)"
    )


def test_a_removed_label_gives_the_pods_class_while_queued_and_waits_while_admitted() -> None:
    batch = Priority("PriorityClass", "batch", 100)
    queued = priority_change(workload(LOW_REF), {}, batch)
    assert queued.patch is not None and queued.patch["spec"]["priorityClassRef"] == PC_REF
    admitted = priority_change(workload(LOW_REF, reserved=True), {}, batch)
    assert admitted.patch is None and admitted.reason == "WorkloadPriorityNotUpdated"
    assert "keeps WorkloadPriorityClass low while Kueue holds quota" in admitted.message
    assert "label was removed, which means PriorityClass batch" in admitted.message
    none = priority_change(workload(LOW_REF), {}, None)  # no class anywhere: none, 0
    assert none.patch is not None
    assert none.patch["spec"] == {"priorityClassRef": None, "priority": 0}


def test_a_class_that_does_not_exist_is_said_and_nothing_changes() -> None:
    why = "the job's label names WorkloadPriorityClass nope, which does not exist"
    change = priority_change(workload(LOW_REF), {PRIORITY_LABEL: "nope"}, why)
    assert change.patch is None
    assert change.message == f"Workload ns/wl keeps WorkloadPriorityClass low: {why}"


class Api:
    """Records patches; raises `error` (an ApiException) instead when given one."""

    def __init__(self, error: ApiException | None = None) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.error = error

    def patch_workload(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        if self.error is not None:
            raise self.error
        self.patches.append((namespace, name, patch))


def follower(api: Api, resolved: Priority | str | None) -> tuple[PriorityFollower, list[Any]]:
    events: list[Any] = []
    return PriorityFollower(
        api,  # type: ignore[arg-type]
        lambda _job, *event: events.append(event),
        lambda _obj, _job: resolved,
    ), events


def labelled(label: str) -> tuple[dict[str, Any], Job]:
    obj = a_job("train", "ns").with_workers(1).obj()
    obj["metadata"]["labels"] = {PRIORITY_LABEL: label}
    return obj, Job.from_object(obj)


def test_the_follower_patches_once_and_says_it_with_kueues_event() -> None:
    api = Api()
    follow, events = follower(api, HIGH)
    wl = workload(LOW_REF)
    follow.follow(*labelled("high"), wl)
    assert [(ns, name) for ns, name, _ in api.patches] == [("ns", "wl")]
    assert wl["spec"]["priority"] == 1000  # the rest of the pass reads the new priority
    follow.follow(*labelled("high"), wl)  # in step now: nothing more
    assert len(api.patches) == 1
    assert [e[:2] for e in events] == [("Normal", "UpdatedWorkload")]


def test_a_warning_is_said_once_per_cause_not_at_every_pass() -> None:
    api = Api()
    follow, events = follower(api, "the class does not exist")
    for _ in range(3):
        follow.follow(*labelled("nope"), workload(LOW_REF))
    assert api.patches == [] and len(events) == 1 and events[0][0] == "Warning"


def test_a_refusal_by_the_workloads_validation_is_said_and_the_job_goes_on() -> None:
    body = '{"kind": "Status", "message": "spec: Invalid value: priorityClassRef is immutable"}'
    follow, events = follower(Api(ApiException(422, "Unprocessable Entity", body)), HIGH)
    follow.follow(*labelled("high"), workload(LOW_REF))
    assert events == [
        (
            "Warning",
            "WorkloadPriorityNotUpdated",
            "Workload ns/wl refused the priority change: spec: Invalid value: "
            "priorityClassRef is immutable",
        )
    ]
    conflict, quiet = follower(Api(ApiException(409, "Conflict")), HIGH)
    conflict.follow(*labelled("high"), workload(LOW_REF))  # Kueue wrote it: next pass
    assert quiet == []
    broken, _ = follower(Api(ApiException(500, "Internal Server Error")), HIGH)
    with pytest.raises(ApiException):
        broken.follow(*labelled("high"), workload(LOW_REF))
