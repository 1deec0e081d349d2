"""The Kueue adapter's decisions against Kueue's own job contract (jobframework), with the
Workload as Kueue would have written it and every write recorded: spec.active is written
only for the job's own spec.suspend, and only once its pods are gone; a deactivation by
Kueue or an admin stops the job for good; pods never run without an admission they hold;
a job whose queue label is removed gives its Workload back; a conflicting admission check
finishes the Workload and fails the job; a missing Kueue API is said, not raised. The same
behaviours against the real Kueue: tests/integration/kueue/test_kueue_contract.py."""

from __future__ import annotations

from typing import Any

from unit.operator.builders import a_job, a_pod

from dtjob_operator.builders import Job
from dtjob_operator.kubehttp import ApiException
from dtjob_operator.kueue.api import KueueNotServed
from dtjob_operator.kueue.backend import KueueBackend
from dtjob_operator.kueue.workload import build_workload
from dtjob_operator.settings import OperatorSettings

SETTINGS = OperatorSettings()
MARK = "dtjob.io/deactivated-for-suspend"


class Kueue:
    """The API server as Kueue left it: one Workload (or none); every write recorded."""

    def __init__(self, workload: dict[str, Any] | None) -> None:
        self.workload = workload
        self.writes: list[tuple[str, Any]] = []

    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.workload

    def create_workload(self, body: dict[str, Any]) -> bool:
        self.writes.append(("create", body["metadata"]["name"]))
        return True

    def patch_workload(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.writes.append(("patch", patch))

    def apply_workload_status(self, body: dict[str, Any], manager: str) -> None:
        self.writes.append(("status", body))

    def set_workload_finalizers(self, workload: dict[str, Any], finalizers: list[str]) -> None:
        self.writes.append(("finalizers", finalizers))

    def delete_workload(self, namespace: str, name: str) -> None:
        self.writes.append(("delete", name))

    def get_resource_flavor(self, name: str) -> dict[str, Any]:
        return {"spec": {"nodeLabels": {"pool": "a"}}}

    def get_local_queue(self, namespace: str, name: str) -> None:
        return None  # a queue of this cluster: no MultiKueue in these tests


JOB = a_job("train", "team-a").with_workers(2, gpus=1)


def job(**spec: Any) -> dict[str, Any]:
    obj = JOB.copy().with_spec(**spec).obj() if spec else JOB.obj()
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    return obj


def workload(*true: str, active: bool = True, ours: bool = False, **status: Any) -> dict[str, Any]:
    wl = build_workload(Job.from_object(job()), "team", SETTINGS)
    wl["metadata"] |= {"resourceVersion": "7", "creationTimestamp": "2026-11-28T00:00:00Z"}
    wl["spec"]["active"] = active
    if ours:
        wl["metadata"]["annotations"] = {MARK: "true"}
    conditions = [{"type": t, "status": "True", "reason": t, "message": f"{t} says so"}
                  for t in true]  # fmt: skip
    wl["status"] = {"conditions": conditions, **status}
    return wl


ADMISSION = {"clusterQueue": "gpus", "podSetAssignments": [
    {"name": "worker", "count": 2, "flavors": {"nvidia.com/gpu": "gpu"}}]}  # fmt: skip
RUNNING = [a_pod(JOB, "worker", i).running().ready().obj() for i in (0, 1)]


def backend(api: Kueue, **settings: Any) -> KueueBackend:
    return KueueBackend(api, OperatorSettings(**settings), lambda: [])  # type: ignore[arg-type]


def test_a_suspended_job_keeps_its_quota_until_its_pods_are_gone() -> None:
    api = Kueue(workload("QuotaReserved", "Admitted", admission=ADMISSION))
    said = backend(api).view(job(suspend=True), RUNNING)  # the planner deletes them
    assert not said.admitted and api.writes == []  # active: the quota is still held
    backend(api).view(job(suspend=True), [])
    (kind, patch), = api.writes  # fmt: skip
    assert kind == "patch" and patch["spec"] == {"active": False}
    assert patch["metadata"]["annotations"] == {MARK: "true"}
    assert patch["metadata"]["resourceVersion"] == "7"


def test_resuming_activates_only_a_workload_the_job_deactivated() -> None:
    api = Kueue(workload(active=False, ours=True))
    backend(api).view(job(), [])
    (_kind, patch), = api.writes  # fmt: skip
    assert patch["spec"] == {"active": True} and patch["metadata"]["annotations"] == {MARK: None}


def test_a_deactivation_by_kueue_or_an_admin_is_kept_and_stops_the_job() -> None:
    evicted = workload("QuotaReserved", "Admitted", "Evicted", active=False, admission=ADMISSION)
    evicted["status"]["conditions"][-1] |= {
        "reason": "Deactivated",
        "message": "The workload is deactivated due to exceeding the maximum number of "
        "re-queuing retries",
    }
    api = Kueue(evicted)
    said = backend(api).view(job(), RUNNING)
    assert said.stop is not None and said.stop_reason == "Deactivated"
    assert "re-queuing retries" in said.stop and "kueuectl resume workload" in said.stop
    assert api.writes == []  # spec.active left as Kueue set it; the quota held: pods run
    gone = backend(api).view(job(), [])
    assert gone.stop_reason == "Deactivated"
    (kind, body), = api.writes  # fmt: skip
    released = {c["type"]: c["status"] for c in body["status"]["conditions"]}
    assert kind == "status" and released["QuotaReserved"] == "False"
    assert body["metadata"]["resourceVersion"] == "7"  # Kueue's writes are strict


def test_pods_never_run_beside_an_admission_they_do_not_hold() -> None:
    api = Kueue(None)  # deleted under the running gang
    said = backend(api).view(job(), RUNNING)
    assert said.stop is not None and said.stop_reason == "AdmissionWithdrawn"
    assert api.writes == []  # no new Workload while the old gang's pods hold the GPUs
    backend(api).view(job(), [])
    assert [k for k, _ in api.writes] == ["create"]
    pending = Kueue(workload("QuotaReserved"))  # quota, not admitted (checks pending)
    assert backend(pending).view(job(), RUNNING).stop_reason == "AdmissionWithdrawn"


def test_a_job_whose_queue_label_is_removed_gives_its_workload_back() -> None:
    api = Kueue(workload("QuotaReserved", "Admitted", admission=ADMISSION))
    unlabelled = JOB.obj()
    said = backend(api).view(unlabelled, RUNNING)
    assert said.stop_reason == "AdmissionWithdrawn" and api.writes == []
    handed = backend(api).view(unlabelled, [])
    assert handed.by == "builtin" and not handed.admitted
    assert [k for k, _ in api.writes] == ["finalizers", "delete"]


def test_a_conflicting_admission_check_finishes_the_workload_and_fails_the_job() -> None:
    wl = workload("QuotaReserved", "Admitted", admission=ADMISSION)
    wl["status"]["admissionChecks"] = [{"name": "prov", "state": "Ready", "podSetUpdates": [
        {"name": "worker", "labels": {"dtjob.io/role": "ps"}}]}]  # fmt: skip
    api = Kueue(wl)
    said = backend(api).view(job(), [])
    assert said.fail is not None and said.fail[0] == "AdmissionConflict"
    assert "dtjob.io/role" in said.fail[1]
    (_kind, body), = api.writes  # fmt: skip
    (finished,) = body["status"]["conditions"]
    assert finished["type"] == "Finished" and finished["reason"] == "FailedToStart"


class NoKueue(Kueue):
    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise KueueNotServed(404)


def test_a_cluster_without_kueues_api_is_said_not_raised() -> None:
    said = backend(NoKueue(None)).view(job(), [])
    assert not said.admitted and "Kueue's Workload API is not served here" in said.message


def test_a_missing_workload_and_a_missing_api_are_told_apart() -> None:
    from dtjob_operator.kueue.api import KueueApi

    def answer(body: str) -> KueueApi:
        class Http:
            def json(self, *args: Any, **kwargs: Any) -> Any:
                raise ApiException(status=404, reason="Not Found", body=body)

        return KueueApi(Http())  # type: ignore[arg-type]

    named = '{"kind":"Status","reason":"NotFound","details":{"name":"w","kind":"workloads"}}'
    assert answer(named).get_workload("ns", "w") is None
    try:
        answer('{"kind":"Status","reason":"NotFound","details":{}}').get_workload("ns", "w")
    except KueueNotServed as exc:
        assert exc.status == 404
    else:
        raise AssertionError("a missing API must raise KueueNotServed")


def test_the_deactivation_cause_is_read_from_what_each_kueue_version_leaves() -> None:
    from dtjob_operator.kueue.backend import deactivation_cause

    stats = {"evictions": [{"reason": r, "underlyingCause": "", "count": n}
                           for r, n in (("PodsReadyTimeout", 2), ("Deactivated", 1))]}  # fmt: skip
    v017 = workload("Evicted", active=False, schedulingStats=stats)
    v017["status"]["conditions"][0] |= {
        "reason": "Deactivated",
        "message": "The workload is deactivated due to exceeding the maximum number of "
        "re-queuing retries",
    }
    assert deactivation_cause(v017) == (
        "The workload is deactivated due to exceeding the maximum number of re-queuing "
        "retries; after evictions PodsReadyTimeout x2"
    )
    v019 = workload(active=False, schedulingStats=stats)  # an earlier eviction's condition
    earlier = {"type": "Evicted", "status": "False", "reason": "PodsReadyTimeout"}
    v019["status"]["conditions"] = [{**earlier, "message": "Previously: x"}]
    assert (
        deactivation_cause(v019) == "its spec.active is false; after evictions PodsReadyTimeout x2"
    )
    assert deactivation_cause(workload(active=False)) == "its spec.active is false"
