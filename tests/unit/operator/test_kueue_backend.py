"""The Kueue backend's answers that need no API server (the rest run against the real
Kueue in integration/kueue): a job with no LocalQueue under admission "kueue" waits and
says how to name one, without a Workload being made."""

from __future__ import annotations

from typing import Any

from unit.operator.builders import a_job

from dtjob_operator.builders import Job
from dtjob_operator.kueue.backend import KueueBackend
from dtjob_operator.kueue.workload import Priority, build_workload
from dtjob_operator.settings import OperatorSettings


class NoApi:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no API call expected, got {name}")


def test_a_job_without_a_queue_waits_and_says_how_to_name_one() -> None:
    backend = KueueBackend(NoApi(), OperatorSettings(admission="kueue"), lambda: [])  # type: ignore[arg-type]
    said = backend.view(a_job("train", "team-a").with_workers(2).obj(), [])
    assert said.admitted is False and said.placements == {} and said.by == "kueue"
    assert said.reason == "NoLocalQueue"
    assert "kubectl label dtj train kueue.x-k8s.io/queue-name=<queue>" in said.message


class Classes:
    """The WorkloadPriorityClasses the API server would return (the priority test's input)."""

    def __init__(self, **values: int) -> None:
        self.values = values

    def get_workload_priority_class(self, name: str) -> dict[str, Any] | None:
        return {"value": self.values[name]} if name in self.values else None


PCS = [
    {"metadata": {"name": "batch"}, "value": 100},
    {"metadata": {"name": "default"}, "value": 5, "globalDefault": True},
]


def priority_of(labels: dict[str, str], pc: str | None = None) -> Any:
    backend = KueueBackend(Classes(urgent=9000), OperatorSettings(), lambda: PCS)  # type: ignore[arg-type]
    builder = a_job("train", "team-a").with_workers(2)
    obj = builder.obj()
    obj["metadata"]["labels"] = labels
    if pc:
        obj["spec"]["priorityClassName"] = pc
    return backend._priority(obj, Job.from_object(obj))


def test_the_priority_follows_kueues_order_of_sources() -> None:
    wpc = {"kueue.x-k8s.io/priority-class": "urgent"}
    assert priority_of(wpc, pc="batch") == Priority("WorkloadPriorityClass", "urgent", 9000)
    assert priority_of({}, pc="batch") == Priority("PriorityClass", "batch", 100)
    assert priority_of({}) == Priority("PriorityClass", "default", 5)  # the global default
    missing = priority_of({"kueue.x-k8s.io/priority-class": "nope"})
    assert "WorkloadPriorityClass nope, which does not exist" in missing
    assert "PriorityClass gone, which does not exist" in priority_of({}, pc="gone")


class Finalizers:
    """Records the finalizer patches the backend makes."""

    def __init__(self) -> None:
        self.set: list[tuple[str, list[str]]] = []

    def set_workload_finalizers(self, workload: dict[str, Any], finalizers: list[str]) -> None:
        self.set.append((workload["metadata"]["name"], finalizers))


def a_workload(name: str, uid: str, *finalizers: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "finalizers": list(finalizers),
                         "labels": {"kueue.x-k8s.io/job-uid": uid}}}  # fmt: skip


def test_a_gone_jobs_workloads_lose_only_kueues_finalizer() -> None:
    api = Finalizers()
    backend = KueueBackend(api, OperatorSettings(), lambda: [])  # type: ignore[arg-type]
    ours = "kueue.x-k8s.io/resource-in-use"
    backend.writes.let_go([a_workload("old", "u1", ours, "example.com/keep"),
                    a_workload("done", "u2"), a_workload("live", "u3", ours)], "u3")  # fmt: skip
    assert api.set == [("old", ["example.com/keep"])]


class AdmittedApi:
    """The API server of a job whose Workload Kueue admitted (a flavor without labels)."""

    def __init__(self, workload: dict[str, Any]) -> None:
        self.workload = workload

    def get_workload(self, namespace: str, name: str) -> dict[str, Any]:
        return self.workload

    def get_resource_flavor(self, name: str) -> dict[str, Any]:
        return {"spec": {}}


def test_a_partially_admitted_elastic_job_runs_at_the_count_kueue_admitted() -> None:
    obj = a_job("flex", "team-a").with_workers(4, gpus=1, minReplicas=1).obj()
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    full = build_workload(Job.from_object(obj), "team", OperatorSettings())
    assigned = {"name": "worker", "count": 2, "flavors": {"nvidia.com/gpu": "gpu"}}
    full["status"] = {
        "conditions": [{"type": t, "status": "True"} for t in ("QuotaReserved", "Admitted")],
        "admission": {"clusterQueue": "gpus", "podSetAssignments": [assigned]},
    }
    backend = KueueBackend(AdmittedApi(full), OperatorSettings(), lambda: [])  # type: ignore[arg-type]
    said = backend.view(obj, [])
    assert said.admitted and said.elastic_size == 2
    assert said.admitted_message.endswith("worker partially admitted: 2 of 4 pods")
    assert sorted(said.placements) == ["flex-worker-0", "flex-worker-1"]
    # A job that is not elastic gets no size: its gang is the spec's.
    fixed = a_job("flex", "team-a").with_workers(2, gpus=1).obj()
    fixed["metadata"]["labels"] = obj["metadata"]["labels"]
    assert backend.view(fixed, []).elastic_size is None
