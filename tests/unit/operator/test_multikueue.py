"""The Kueue backend under MultiKueue, against a recording stand-in for Kueue's objects (the
real two-cluster flow runs in integration/multikueue): a job sent to a queue that leads to
MultiKueue without spec.managedBy waits and says what to set, and gets no Workload; a
worker's copy waits for, adopts and runs the Workload MultiKueue made for it and never
makes its own; on the manager, a dispatched job's admission places nothing."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.builders import a_job

from dtjob_api.contract import MANAGED_BY_MULTIKUEUE
from dtjob_api.multikueue import admission_check_names
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_operator.builders import Job
from dtjob_operator.dispatched import what_to_say
from dtjob_operator.kueue.backend import KueueBackend
from dtjob_operator.kueue.workload import build_workload, workload_name
from dtjob_operator.settings import OperatorSettings

Obj = dict[str, Any]
QUEUE = "kueue.x-k8s.io/queue-name"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
ADMITTED = [{"type": t, "status": "True"} for t in ("QuotaReserved", "Admitted")]


class Kueue:
    """Kueue's objects as the API server would return them, and the writes made."""

    def __init__(self, workload: Obj | None = None, multikueue: bool = False) -> None:
        self.workload = workload
        self.multikueue = multikueue
        self.created: list[Obj] = []
        self.patched: list[Obj] = []

    def get_local_queue(self, namespace: str, name: str) -> Obj | None:
        return {"spec": {"clusterQueue": "everywhere"}} if name == "team" else None

    def get_cluster_queue(self, name: str) -> Obj | None:
        checks = [{"name": "dispatch"}] if self.multikueue else []
        return {"spec": {"admissionChecksStrategy": {"admissionChecks": checks}}}

    def get_admission_check(self, name: str) -> Obj | None:
        return {"spec": {"controllerName": "kueue.x-k8s.io/multikueue"}}

    def get_workload(self, namespace: str, name: str) -> Obj | None:
        if self.workload is not None and self.workload["metadata"]["name"] == name:
            return self.workload
        return None

    def get_workload_priority_class(self, name: str) -> Obj | None:
        return None

    def get_resource_flavor(self, name: str) -> Obj:
        return {"spec": {}}

    def create_workload(self, body: Obj) -> bool:
        self.created.append(body)
        return True

    def patch_workload(self, namespace: str, name: str, patch: Obj) -> None:
        self.patched.append(patch)
        assert self.workload is not None
        self.workload["metadata"] |= patch["metadata"]

    def apply_workload_status(self, body: Obj, manager: str) -> None:
        self.patched.append(body)


def backend(api: Kueue) -> KueueBackend:
    return KueueBackend(api, OperatorSettings(), lambda: [])  # type: ignore[arg-type]


def a_queued_job(**spec: Any) -> Obj:
    obj = a_job("train", "team-a").with_workers(2, gpus=1).obj()
    obj["metadata"]["labels"] = {QUEUE: "team"}
    obj["spec"] |= spec
    return obj


def test_a_job_sent_to_a_multikueue_queue_without_managed_by_waits_and_says_what_to_set() -> None:
    api = Kueue(multikueue=True)
    said = backend(api).view(a_queued_job(), [])
    assert not said.admitted and said.reason == "ManagedByRequired"
    assert f"spec.managedBy: {MANAGED_BY_MULTIKUEUE}" in said.message
    assert "ClusterQueue everywhere" in said.message and "AdmissionCheck dispatch" in said.message
    assert api.created == []  # no Workload: MultiKueue would only reject it
    # With the field set, the Workload is made as for any Kueue job.
    backend(api).view(a_queued_job(managedBy=MANAGED_BY_MULTIKUEUE), [])
    assert len(api.created) == 1
    # A queue of this cluster needs nothing.
    local = Kueue(multikueue=False)
    backend(local).view(a_queued_job(), [])
    assert len(local.created) == 1


def worker_copy(workload_name: str) -> Obj:
    """The copy MultiKueue makes on a worker: no managedBy, its origin, the Workload's name."""
    obj = a_queued_job()
    obj["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] = "manager"
    obj["metadata"]["annotations"] = {PREBUILT: workload_name}
    return obj


def made_by_multikueue(obj: Obj, name: str, admitted: bool = True) -> Obj:
    """The Workload the manager's Kueue made on the worker: the manager's, without owner."""
    workload = build_workload(Job.from_object(obj), "team", OperatorSettings())
    workload["metadata"] |= {"name": name, "resourceVersion": "7", "ownerReferences": [],
                             "finalizers": []}  # fmt: skip
    assigned = [{"name": "worker", "count": 2, "flavors": {"nvidia.com/gpu": "gpu"}}]
    if admitted:
        workload["status"] = {"conditions": ADMITTED, "admission": {
            "clusterQueue": "local", "podSetAssignments": assigned}}  # fmt: skip
    return workload


def test_a_workers_copy_waits_for_adopts_and_runs_the_workload_multikueue_made() -> None:
    obj = worker_copy("made-on-the-manager")
    api = Kueue()
    said = backend(api).view(obj, [])
    assert not said.admitted and said.reason == "WaitingForPrebuiltWorkload"
    assert "made-on-the-manager" in said.message
    assert api.created == []  # never a Workload of its own
    api.workload = made_by_multikueue(obj, "made-on-the-manager")
    said = backend(api).view(obj, [])
    assert said.admitted and sorted(said.placements) == ["train-worker-0", "train-worker-1"]
    adopted = api.patched[0]["metadata"]
    assert adopted["ownerReferences"][0] | {"uid": "u"} == {
        "apiVersion": "dtjob.io/v1alpha1", "kind": "DistributedTrainingJob", "name": "train",
        "uid": "u", "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    assert adopted["labels"] == {"kueue.x-k8s.io/job-uid": obj["metadata"]["uid"]}
    assert adopted["resourceVersion"] == "7"  # adopted as read, or not at all
    assert "spec" not in api.patched[0]
    assert api.created == []


def test_a_workload_another_object_controls_is_not_adopted() -> None:
    obj = worker_copy("taken")
    api = Kueue(made_by_multikueue(obj, "taken"))
    api.workload["metadata"]["ownerReferences"] = [  # type: ignore[index]
        {"kind": "Job", "name": "other", "uid": "someone-else", "controller": True}
    ]
    said = backend(api).view(obj, [])
    assert not said.admitted and "belongs to another object" in said.message
    assert api.patched == [] and said.placements == {}


def test_a_prebuilt_workload_that_does_not_match_the_gang_fails_the_copy_and_finishes() -> None:
    obj = worker_copy("stale")
    api = Kueue(made_by_multikueue(obj, "stale"))
    api.workload["spec"]["podSets"][0]["count"] = 3  # type: ignore[index]
    said = backend(api).view(obj, [])
    assert said.fail is not None and said.fail[0] == "AdmissionConflict"
    assert "{'worker': 3}" in said.fail[1] and "{'worker': 2}" in said.fail[1]
    finished = [b for b in api.patched if "status" in b]
    assert finished[0]["status"]["conditions"][0]["reason"] == "FailedToStart"


def test_a_dispatched_job_on_the_manager_is_admitted_with_its_cluster_and_places_nothing() -> None:
    obj = a_queued_job(managedBy=MANAGED_BY_MULTIKUEUE)
    workload = made_by_multikueue(obj, workload_name(Job.from_object(obj)))
    workload["status"]["clusterName"] = "worker-east"
    said = backend(Kueue(workload)).view(obj, [])
    assert said.admitted and said.placements == {}
    assert what_to_say(said) == ("Normal", "Dispatched", "MultiKueue dispatched it to worker-east")


def test_the_admission_checks_of_a_cluster_queue_in_either_api_shape() -> None:
    strategy = {"admissionChecksStrategy": {"admissionChecks": [{"name": "a"}, {"name": "b"}]}}
    assert admission_check_names({"spec": strategy}) == ["a", "b"]
    assert admission_check_names({"spec": {"admissionChecks": ["c"]}}) == ["c"]
    assert admission_check_names({}) == []


def test_managed_by_takes_only_this_operator_or_multikueue() -> None:
    base = a_job("train", "team-a").with_workers(1).obj()["spec"]
    for value in ("dtjob.io/operator", MANAGED_BY_MULTIKUEUE):
        assert DistributedTrainingJobSpec.model_validate(base | {"managedBy": value})
    with pytest.raises(ValueError, match="managedBy"):
        DistributedTrainingJobSpec.model_validate(base | {"managedBy": "example.com/other"})


def test_a_dispatched_job_without_a_queue_waits_and_says_to_name_one() -> None:
    obj = a_queued_job(managedBy=MANAGED_BY_MULTIKUEUE)
    obj["metadata"]["labels"] = {}
    api = Kueue(multikueue=True)
    said = backend(api).view(obj, [])
    assert not said.admitted and said.reason == "NoLocalQueue" and said.by == "kueue"
    assert "names no LocalQueue" in said.message and "MultiKueue" in said.message
    assert api.created == [] and api.patched == []
