"""The caches' reads: live until an informer has listed, from the cache after, live again
for a job whose pods were just written until the cache shows the same; and trims that
keep everything the admission and the lost-node check read."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from unit.operator.builders import PodBuilder, at
from unit.operator.caching import pod, watch
from unit.operator.planning import DDP, SETTINGS, STARTING, w

from dtjob_operator.admission.resources import pod_requests
from dtjob_operator.admission.snapshot import node_view
from dtjob_operator.builders.children import build_pods
from dtjob_operator.builders.job import Job
from dtjob_operator.caches import Caches, trim_job_pod, trim_node, trim_pod_for_capacity
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.informer import Informer
from dtjob_operator.lifecycle import Observed, plan
from dtjob_operator.policies.nodes import is_lost
from dtjob_operator.settings import OperatorSettings


class LiveApi:
    """The API server's answer to a job's pod list, counted."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.lists = 0

    def list_pods(self, namespace: str, job_name: str) -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.pods)


def caches_with(api: LiveApi) -> tuple[Caches, Informer]:
    caches = Caches(api, OperatorSettings(), lambda key: None, lambda: None)  # type: ignore[arg-type]
    informer = Informer("job-pods", lambda **_: None, index_label=LABEL_JOB_NAME)
    caches.job_pods = [informer]
    return caches, informer


def test_reads_go_live_until_the_informer_has_listed_then_come_from_the_cache() -> None:
    api = LiveApi()
    api.pods = [pod("a", "1")]
    caches, informer = caches_with(api)
    assert [p["metadata"]["name"] for p in caches.job_pods_of("ns", "j", "job")] == ["a"]
    assert api.lists == 1
    informer.synced.set()
    watch(informer, "ADDED", pod("a", "1"))
    assert [p["metadata"]["name"] for p in caches.job_pods_of("ns", "j", "job")] == ["a"]
    assert api.lists == 1  # from the cache


def test_a_job_whose_pods_were_written_reads_live_until_the_cache_agrees() -> None:
    api = LiveApi()
    caches, informer = caches_with(api)
    informer.synced.set()
    caches.wrote_pods("job")  # created a and b; the watch has not told yet
    api.pods = [pod("a", "5"), pod("b", "6")]
    seen = caches.job_pods_of("ns", "j", "job")
    assert {p["metadata"]["name"] for p in seen} == {"a", "b"}  # never the stale cache
    watch(informer, "ADDED", pod("a", "5"))
    caches.job_pods_of("ns", "j", "job")
    assert api.lists == 2  # b still missing from the cache: live again
    watch(informer, "ADDED", pod("b", "6"))
    caches.job_pods_of("ns", "j", "job")  # agrees now: settled
    assert api.lists == 3
    caches.job_pods_of("ns", "j", "job")
    assert api.lists == 3
    # A deletion the same way: the cache keeps the pod until the watch says it went.
    caches.wrote_pods("job")
    api.pods = [pod("a", "5")]
    assert {p["metadata"]["name"] for p in caches.job_pods_of("ns", "j", "job")} == {"a"}
    watch(informer, "DELETED", pod("b", "7"))
    caches.job_pods_of("ns", "j", "job")
    caches.job_pods_of("ns", "j", "job")
    assert api.lists == 5


def test_the_same_name_of_another_incarnation_is_not_agreement() -> None:
    api = LiveApi()
    caches, informer = caches_with(api)
    informer.synced.set()
    watch(informer, "ADDED", pod("a", "5", uid="old"))
    caches.wrote_pods("job")
    api.pods = [pod("a", "9", uid="new")]  # the restarted gang's pod, same name
    assert caches.job_pods_of("ns", "j", "job")[0]["metadata"]["uid"] == "new"
    assert caches.job_pods_of("ns", "j", "job")[0]["metadata"]["uid"] == "new"
    assert api.lists == 2


def test_what_a_pass_created_read_from_the_cache_once_the_watch_brought_it() -> None:
    api = LiveApi()
    caches, informer = caches_with(api)
    informer.synced.set()
    caches.wrote_pods("job")
    caches.created_pod("job", "a", "uid-a")
    caches.created_pod("job", "b", "uid-b")
    caches.writes_done("job")
    api.pods = [pod("a", "5"), pod("b", "6")]
    assert {p["metadata"]["name"] for p in caches.job_pods_of("ns", "j", "job")} == {"a", "b"}
    assert api.lists == 1  # the watch has brought neither yet: live
    watch(informer, "ADDED", pod("a", "5"))
    watch(informer, "ADDED", pod("b", "6"))
    for _ in range(3):
        assert {p["metadata"]["name"] for p in caches.job_pods_of("ns", "j", "job")} == {"a", "b"}
    assert api.lists == 1  # met: no live read at all


def test_a_created_name_shown_as_another_incarnation_is_not_met() -> None:
    api = LiveApi()
    caches, informer = caches_with(api)
    informer.synced.set()
    watch(informer, "ADDED", pod("a", "5", uid="old"))
    caches.wrote_pods("job")
    caches.created_pod("job", "a", "new")
    caches.writes_done("job")
    api.pods = [pod("a", "9", uid="new")]
    assert caches.job_pods_of("ns", "j", "job")[0]["metadata"]["uid"] == "new"
    watch(informer, "MODIFIED", pod("a", "9", uid="new"))
    assert caches.job_pods_of("ns", "j", "job")[0]["metadata"]["uid"] == "new"
    assert api.lists == 1


def test_a_deleted_pod_is_met_once_the_cache_shows_it_terminating_or_gone() -> None:
    api = LiveApi()
    caches, informer = caches_with(api)
    informer.synced.set()
    watch(informer, "ADDED", pod("a", "5"))
    caches.wrote_pods("job")
    caches.deleted_pod("job", "a", "uid-a")
    caches.writes_done("job")
    going = pod("a", "6")
    going["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    api.pods = [going]
    assert caches.job_pods_of("ns", "j", "job")[0]["metadata"].get("deletionTimestamp")
    assert api.lists == 1  # the cache still shows it running
    watch(informer, "MODIFIED", going)
    assert caches.job_pods_of("ns", "j", "job")[0]["metadata"].get("deletionTimestamp")
    assert api.lists == 1


def test_a_pass_that_raised_or_lost_an_answer_leaves_live_reads_until_they_agree() -> None:
    for report in ("raised", "unknown"):
        api = LiveApi()
        caches, informer = caches_with(api)
        informer.synced.set()
        caches.wrote_pods("job")
        caches.created_pod("job", "a", "uid-a")
        if report == "unknown":  # e.g. a create whose answer never came
            caches.created_pod("job", "b", None)
            caches.writes_done("job")
        watch(informer, "ADDED", pod("a", "5"))
        api.pods = [pod("a", "5"), pod("b", "6")]
        caches.job_pods_of("ns", "j", "job")
        assert api.lists == 1, report  # a alone would meet what was reported: not enough
        watch(informer, "ADDED", pod("b", "6"))
        caches.job_pods_of("ns", "j", "job")  # live, and agrees: settled
        caches.job_pods_of("ns", "j", "job")
        assert api.lists == 2, report


def test_the_capacity_trim_keeps_what_a_pod_is_charged() -> None:
    full = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "managedFields": [{}] * 50,
                     "annotations": {"big": "x" * 10_000}, "labels": {"a": "b"}},
        "spec": {
            "nodeName": "n1",
            "volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(20)],
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "image": "i",
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "init", "image": "i", "resources": {"requests": {"cpu": "4"}}},
            ],
            "containers": [
                {"name": "c", "image": "i", "env": [{"name": "X", "value": "y"}] * 30,
                 "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"cpu": "2"}}},
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready"}] * 5},
    }  # fmt: skip
    trimmed = trim_pod_for_capacity(full)
    assert pod_requests(trimmed["spec"]) == pod_requests(full["spec"])
    assert trimmed["spec"]["nodeName"] == "n1" and trimmed["status"] == {"phase": "Running"}
    assert trimmed["metadata"]["labels"] == {"a": "b"}
    assert len(repr(trimmed)) < len(repr(full)) / 10


def test_the_node_trim_keeps_what_admission_and_the_lost_node_check_read() -> None:
    node = {
        "metadata": {"name": "n1", "labels": {"gpu": "h100"}, "managedFields": [{}],
                     "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"},
            "conditions": [{"type": "Ready", "status": "Unknown"}],
            "images": [{"names": [f"img{i}"], "sizeBytes": 1} for i in range(500)],
        },
    }  # fmt: skip
    import copy

    full = copy.deepcopy(node)
    trimmed = trim_node(node)
    assert "images" not in trimmed["status"]
    assert node_view(trimmed) == node_view(full)
    assert is_lost(trimmed) == is_lost(full) is True


class JobApi:
    def __init__(self) -> None:
        self.job: dict[str, Any] | None = None
        self.jobs: list[dict[str, Any]] = []
        self.gets = 0
        self.lists = 0

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.job

    def list_jobs(self, namespaces: list[str] | None = None) -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.jobs)


def a_job(rv: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "resourceVersion": rv},
            "status": {"phase": phase}}  # fmt: skip


def test_a_job_is_read_live_until_the_cache_has_seen_the_status_written() -> None:
    api = JobApi()
    caches = Caches(api, OperatorSettings(), lambda key: None, lambda: None)  # type: ignore[arg-type]
    informer = Informer("jobs", lambda **_: None)
    caches.jobs = [informer]
    informer.synced.set()
    api.job = a_job("1", "Queued")
    assert caches.get_job("ns", "j") == api.job and api.gets == 1  # not in the cache yet
    watch(informer, "ADDED", a_job("1", "Queued"))
    assert caches.get_job("ns", "j")["status"]["phase"] == "Queued" and api.gets == 1
    caches.wrote_job("ns", "j", "2")  # the reconcile wrote Starting
    api.job = a_job("2", "Starting")
    assert caches.get_job("ns", "j")["status"]["phase"] == "Starting" and api.gets == 2
    watch(informer, "MODIFIED", a_job("2", "Starting"))
    assert caches.get_job("ns", "j")["status"]["phase"] == "Starting" and api.gets == 2
    # A write that failed may have happened: live until the cache reaches what a live
    # read then showed.
    caches.wrote_job("ns", "j", None)
    api.job = a_job("3", "Running")
    assert caches.get_job("ns", "j")["status"]["phase"] == "Running" and api.gets == 3
    assert caches.get_job("ns", "j")["status"]["phase"] == "Running" and api.gets == 4
    watch(informer, "MODIFIED", a_job("3", "Running"))
    assert caches.get_job("ns", "j")["status"]["phase"] == "Running" and api.gets == 4
    # The reconcile may build on what it read: the cache keeps its own copy.
    caches.get_job("ns", "j")["status"]["phase"] = "scribbled"
    assert informer.get("ns", "j")["status"]["phase"] == "Running"


def test_a_job_deleted_or_recreated_under_the_same_name_is_never_read_stale() -> None:
    """kopf's watch can be a moment ahead of the cache's: the incarnation it saw wins."""
    api = JobApi()
    caches = Caches(api, OperatorSettings(), lambda key: None, lambda: None)  # type: ignore[arg-type]
    informer = Informer("jobs", lambda **_: None)
    caches.jobs = [informer]
    informer.synced.set()
    old = a_job("1", "Running")
    old["metadata"]["uid"] = "old"
    watch(informer, "ADDED", old)
    caches.saw_job("ns", "j", "old")
    assert caches.get_job("ns", "j")["metadata"]["uid"] == "old" and api.gets == 0
    caches.saw_job("ns", "j", None)  # deleted, the cache not told yet
    api.job = None
    assert caches.get_job("ns", "j") is None and api.gets == 1
    caches.forget("old", ("ns", "j"))
    new = a_job("5", "Queued")
    new["metadata"]["uid"] = "new"
    caches.saw_job("ns", "j", "new")  # created again, the cache still holds the old one
    api.job = new
    assert caches.get_job("ns", "j")["metadata"]["uid"] == "new" and api.gets == 2
    watch(informer, "DELETED", old)
    watch(informer, "ADDED", new)
    assert caches.get_job("ns", "j")["metadata"]["uid"] == "new" and api.gets == 2


def test_the_admission_lists_jobs_from_the_cache_but_never_misses_a_write_or_a_deletion() -> None:
    api = JobApi()
    caches = Caches(api, OperatorSettings(), lambda key: None, lambda: None)  # type: ignore[arg-type]
    informer = Informer("jobs", lambda **_: None)
    caches.jobs = [informer]
    api.jobs = [a_job("1", "Queued")]
    assert caches.list_jobs() == api.jobs and api.lists == 1  # not listed yet: live
    informer.synced.set()
    watch(informer, "ADDED", a_job("1", "Queued"))
    assert [j["status"]["phase"] for j in caches.list_jobs()] == ["Queued"]
    assert api.lists == 1 and api.gets == 0  # from the cache
    caches.wrote_job("ns", "j", "2")  # the reconcile wrote the admission; not seen back yet
    api.job = a_job("2", "Starting")
    assert [j["status"]["phase"] for j in caches.list_jobs()] == ["Starting"]
    assert api.gets == 1  # that one job live, never a list
    watch(informer, "MODIFIED", a_job("2", "Starting"))
    assert [j["status"]["phase"] for j in caches.list_jobs()] == ["Starting"] and api.gets == 1
    # Another write followed ours before the cache saw either: one live read, then the
    # cache again once it holds what that read showed.
    caches.wrote_job("ns", "j", "3")
    api.job = a_job("4", "Running")
    assert [j["status"]["phase"] for j in caches.list_jobs()] == ["Running"] and api.gets == 2
    watch(informer, "MODIFIED", a_job("4", "Running"))
    assert [j["status"]["phase"] for j in caches.list_jobs()] == ["Running"] and api.gets == 2
    assert [j["status"]["phase"] for j in caches.list_jobs()] == ["Running"] and api.gets == 2
    # Deleted per kopf's watch, still in the cache: a pass does not count it.
    job = a_job("2", "Starting")
    job["metadata"]["uid"] = "u"
    watch(informer, "MODIFIED", job)
    caches.saw_job("ns", "j", None)
    api.job = None
    assert caches.list_jobs() == [] and api.gets == 3


def _as_created(builder: PodBuilder) -> dict[str, Any]:
    """The pod as the operator builds it (full spec: env, volumes, probes...), carrying the
    builder's metadata and status, plus what kubelets and the API server add."""
    pod = builder.obj()
    built = next(m for m in build_pods(Job.from_object(DDP.obj()), 0, SETTINGS)
                 if m["metadata"]["name"] == pod["metadata"]["name"])  # fmt: skip
    pod["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:x": {}}}] * 5
    for c in pod["status"].get("containerStatuses", []):
        c.update(image="dtjob/trainer:1", imageID="sha256:" + "0" * 64, containerID="c://1")
    return {**pod, "spec": {**built["spec"], **pod.get("spec", {})}}


SCENARIOS: dict[str, list[PodBuilder]] = {
    "pending": [w(0), w(1)],
    "running": [w(0).running().ready().on_node("n1"), w(1).running().ready().on_node("n2")],
    "one_failed": [w(0).running().ready().on_node("n1"), w(1).failed(exit_code=137)],
    "evicted": [w(0).running().ready().on_node("n1"), w(1).evicted()],
    "pulling": [w(0).waiting("ImagePullBackOff", "back-off pulling"), w(1)],
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_job_pod_trim_keeps_every_decision_of_the_planner_and_the_admission(
    scenario: str,
) -> None:
    full = [_as_created(b) for b in SCENARIOS[scenario]]
    trimmed = [trim_job_pod(copy.deepcopy(p)) for p in full]
    assert len(repr(trimmed)) < len(repr(full)) / 4  # the point of it

    def planned(pods: list[dict[str, Any]]) -> Any:
        observed = Observed(job=STARTING.obj(), pods=pods, children=frozenset(),
                            progress=None, now=at(30))  # fmt: skip
        p = plan(observed, SETTINGS)
        return p.status, [m["metadata"]["name"] for m in p.create], p.delete_pods, p.events

    assert planned(trimmed) == planned(full)
    for t, f in zip(trimmed, full, strict=True):
        assert pod_requests(t["spec"]) == pod_requests(f["spec"])
        assert t["spec"].get("nodeName") == f["spec"].get("nodeName")
        assert t["metadata"]["labels"] == f["metadata"]["labels"]


def test_cached_objects_share_their_keys_and_short_strings_and_stay_equal() -> None:
    informer = Informer("job-pods", lambda **_: None, index_label=LABEL_JOB_NAME)
    informer.synced.set()
    long_message = "x" * 500
    for name in ("a", "b"):  # each event parsed on its own: equal strings, distinct objects
        event = json.loads(json.dumps({"type": "ADDED", "object": {
            **pod(name, "1"), "status": {"phase": "Running", "message": long_message},
        }}))  # fmt: skip
        watch(informer, event["type"], event["object"])
    a, b = informer.get("ns", "a"), informer.get("ns", "b")
    assert a is not None and b is not None
    assert a == {**pod("a", "1"), "status": {"phase": "Running", "message": long_message}}
    key_a = next(k for k in a["status"] if k == "phase")
    key_b = next(k for k in b["status"] if k == "phase")
    assert key_a is key_b and a["status"]["phase"] is b["status"]["phase"]
    assert a["metadata"]["labels"][LABEL_JOB_NAME] is b["metadata"]["labels"][LABEL_JOB_NAME]
    assert a["status"]["message"] is not b["status"]["message"]  # long: not worth sharing


def test_a_pass_reading_a_job_while_the_reconcile_writes_it_never_hides_that_write() -> None:
    """The admission thread's GET can predate a status write the reconcile makes meanwhile:
    it must not stand for that write, or the next reconcile would trust a stale cache."""
    caches = Caches(JobApi(), OperatorSettings(), lambda key: None, lambda: None)  # type: ignore[arg-type]
    informer = Informer("jobs", lambda **_: None)
    caches.jobs = [informer]
    informer.synced.set()
    watch(informer, "ADDED", a_job("1", "Restarting"))
    caches.wrote_job("ns", "j", "2")  # a first write, not in the cache yet

    class RacingApi(JobApi):
        def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
            job = a_job("2", "Restarting")  # read before the write below landed
            caches.wrote_job("ns", "j", "3")  # the reconcile writes Queued meanwhile
            return job

    caches.api = RacingApi()  # type: ignore[assignment]
    caches.list_jobs()
    watch(informer, "MODIFIED", a_job("2", "Restarting"))
    caches.api = live = JobApi()  # type: ignore[assignment]
    live.job = a_job("3", "Queued")
    assert caches.get_job("ns", "j")["status"]["phase"] == "Queued"  # not the stale cache


def test_a_deleted_job_pod_leaves_its_last_state_behind() -> None:
    caches, informer = caches_with(LiveApi())
    informer._on_change = caches.note_gone
    gone = {**pod("j-worker-1", "2"), "spec": {"nodeName": "dead"}}
    watch(informer, "ADDED", pod("j-worker-0", "1"))
    watch(informer, "MODIFIED", pod("j-worker-0", "3"))
    assert caches.gone_pods.of("ns", "j") == []  # nothing gone yet
    watch(informer, "DELETED", gone)
    assert [p["spec"]["nodeName"] for p in caches.gone_pods.of("ns", "j")] == ["dead"]
    assert caches.gone_pods.of("ns", "other") == []


def test_the_pods_of_a_deleted_job_leave_nothing_behind() -> None:
    """A namespace deleted takes its pods and jobs in either order: whichever comes
    first, no state of the pods is kept (ten minutes of 1,600 of them, after a burst)."""
    caches, pods = caches_with(LiveApi())
    pods._on_change = caches.note_gone
    jobs = Informer("jobs", lambda **_: None)
    caches.jobs = [jobs]
    jobs.synced.set()
    watch(jobs, "ADDED", a_job("1", "Running"))
    watch(pods, "DELETED", pod("j-worker-0", "2"))  # the job is there: kept
    assert [p["metadata"]["name"] for p in caches.gone_pods.of("ns", "j")] == ["j-worker-0"]
    caches.forget("uid-j", ("ns", "j"))  # the reconcile found the job deleted
    assert caches.gone_pods.of("ns", "j") == [] and len(caches.gone_pods) == 0
    deleting = a_job("3", "Running")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    watch(jobs, "MODIFIED", deleting)
    watch(pods, "DELETED", pod("j-worker-1", "4"))  # its job is going: not kept
    watch(jobs, "DELETED", deleting)
    watch(pods, "DELETED", pod("j-worker-2", "5"))  # its job is gone: not kept
    assert len(caches.gone_pods) == 0
