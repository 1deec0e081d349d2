"""The planner's side of admission: Queued with position, pods-ready timeout, preemption."""

from __future__ import annotations

import json
from typing import Any

from unit.operator.builders import JobBuilder, PodBuilder, a_job, a_pod, at, iso, pods

from dtjob_api.status import AdmissionBackendName
from dtjob_operator.admission.seam import AdmissionVerdict
from dtjob_operator.lifecycle import Observed, Plan, plan
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.status import status_patch

SETTINGS = OperatorSettings(pods_ready_timeout_seconds=60)
DDP = a_job().with_workers(2, gpus=4)
KUEUE = AdmissionBackendName.KUEUE


def run(job: JobBuilder, *observed: PodBuilder, now: float = 0, **admission: Any) -> Plan:
    """One planner pass; `admission`: the AdmissionVerdict's fields (admission/seam.py)."""
    verdict = AdmissionVerdict(**admission)
    return plan(Observed(job=job.obj(), pods=pods(*observed), now=at(now), admission=verdict),
                SETTINGS)  # fmt: skip


def after(job: JobBuilder, *observed: PodBuilder, now: float = 0, **admission: Any) -> JobBuilder:
    return job.copy().with_full_status(run(job, *observed, now=now, **admission).status)


def cond(p: Plan | JobBuilder, type_: str) -> dict[str, Any]:
    status = p.status if isinstance(p, Plan) else p.obj()["status"]
    return next(c for c in status["conditions"] if c["type"] == type_)


def pod(index: int, created: float = 0, ready: bool = False) -> PodBuilder:
    b = a_pod(DDP, "worker", index).running()
    if ready:
        b = b.ready()
    obj = b._pod  # creation time is what the pods-ready timeout counts from
    obj["metadata"]["creationTimestamp"] = iso(created)
    return b


def test_waiting_job_is_queued_with_position_and_holds_nothing() -> None:
    p = run(DDP, admitted=False, message="needs 8", queue_position=3)
    assert p.status["phase"] == "Queued" and p.status["queuePosition"] == 3
    assert p.create == [] and cond(p, "Admitted")["message"] == "needs 8"
    assert [e.reason for e in p.events] == ["EphemeralCheckpoints", "WaitingForAdmission"]
    queued = DDP.copy().with_full_status(p.status)
    again = run(queued, admitted=False, message="needs 8", queue_position=2)
    assert again.events == [] and again.status["queuePosition"] == 2
    admitted = run(queued)
    assert admitted.status["phase"] == "Starting" and "queuePosition" not in admitted.status
    assert cond(admitted, "Admitted")["status"] == "True"


def test_inadmissible_reason_is_an_event_of_its_own() -> None:
    p = run(DDP, admitted=False, reason="Inadmissible", message="never")
    assert cond(p, "Admitted")["reason"] == "Inadmissible"


def test_gang_not_ready_in_time_is_released_and_requeued() -> None:
    starting = after(DDP, now=0)
    p = run(starting, pod(0, ready=True), pod(1), now=30)
    assert p.status["phase"] == "Starting" and p.requeue_after is not None
    assert p.requeue_after <= 30
    p = run(starting, pod(0, ready=True), pod(1), now=61)
    assert p.status["phase"] == "Queued" and p.delete_pods == ["j-worker-0", "j-worker-1"]
    assert cond(p, "Admitted")["reason"] == "PodsReadyTimeout"
    assert p.status["admission"] == {
        "backend": "builtin", "requeues": 1, "lastRequeueTime": iso(61)
    }  # fmt: skip
    assert p.status.get("restarts", 0) == 0
    assert [e.reason for e in p.events] == ["PodsReadyTimeout"]


def test_the_timeout_counts_from_the_gangs_last_pod_not_its_first() -> None:
    """An operator killed after the first pod of a gang (or a leader replaced) creates the
    rest when it is back: that gang was not created before then, and is not released for
    the time the operator was away."""
    # What such an operator left: Admitted=True written first, the phase not yet.
    admitted = cond(run(DDP, now=0), "Admitted")
    cut_short = DDP.copy().with_full_status({"phase": "Queued", "conditions": [admitted]})
    p = run(cut_short, pod(0, created=0, ready=True), now=70)  # worker-1 was never created
    assert p.status["phase"] == "Starting"
    assert [o["metadata"]["name"] for o in p.create if o["kind"] == "Pod"] == ["j-worker-1"]
    assert p.delete_pods == [] and cond(p, "Admitted")["status"] == "True"
    starting = cut_short.copy().with_full_status(p.status)
    p = run(starting, pod(0, created=0, ready=True), pod(1, created=70), now=100)
    assert p.status["phase"] == "Starting" and p.delete_pods == []
    p = run(starting, pod(0, created=0, ready=True), pod(1, created=70), now=131)
    assert p.status["phase"] == "Queued" and cond(p, "Admitted")["reason"] == "PodsReadyTimeout"


def test_no_timeout_once_running_or_when_off() -> None:
    running = after(after(DDP, now=0), pod(0, ready=True), pod(1, ready=True), now=5)
    assert run(running, pod(0, ready=True), pod(1), now=500).status["phase"] == "Running"
    off = plan(
        Observed(job=after(DDP, now=0).obj(), pods=pods(pod(0), pod(1)), now=at(500)),
        OperatorSettings(pods_ready_timeout_seconds=0),
    )
    assert off.status["phase"] == "Starting"


def test_preempted_job_suspends_waits_and_resumes_when_admitted() -> None:
    running = after(after(DDP, now=0), pod(0, ready=True), pod(1, ready=True), now=5)
    p = run(running, pod(0, ready=True), pod(1, ready=True), now=10, stop="by urgent")
    assert p.status["phase"] == "Suspended" and p.delete_pods == ["j-worker-0", "j-worker-1"]
    for type_ in ("Suspended", "Admitted", "Running"):
        assert cond(p, type_)["reason"] == "Preempted"
    assert p.status["admission"]["preemptions"] == 1
    victim = running.copy().with_full_status(p.status)
    waiting = run(victim, now=20, admitted=False, message="behind", queue_position=1)
    assert waiting.status["phase"] == "Suspended" and waiting.create == []
    assert cond(waiting, "Suspended")["status"] == "True"
    assert waiting.status["queuePosition"] == 1
    resumed = run(victim.copy().with_full_status(waiting.status), now=30)
    assert resumed.status["phase"] == "Starting"
    assert cond(resumed, "Suspended")["reason"] == "Resumed"
    assert [m["metadata"]["name"] for m in resumed.create if m["kind"] == "Pod"] == [
        "j-worker-0",
        "j-worker-1",
    ]


def test_user_suspend_gives_up_the_admission() -> None:
    running = after(after(DDP, now=0), pod(0, ready=True), pod(1, ready=True), now=5)
    p = run(running.copy().suspended(), pod(0, ready=True), pod(1, ready=True), now=10)
    assert cond(p, "Admitted") == {**cond(p, "Admitted"), "status": "False", "reason": "Suspended"}


def test_a_queue_managers_admission_says_where_once() -> None:
    said = "admitted by Kueue in ClusterQueue gpus, flavors worker=h100"
    queued = after(DDP, admitted=False)
    p = run(queued, now=30, admitted_message=said, by=KUEUE, announce_changes=True)
    assert cond(p, "Admitted")["message"] == said
    assert [e.message for e in p.events if e.reason == "Admitted"] == [said]
    again = run(
        queued.copy().with_full_status(p.status),
        now=31,
        admitted_message=said,
        by=KUEUE,
        announce_changes=True,
    )
    assert not any(e.reason == "Admitted" for e in again.events)
    built_in = run(queued, now=30)
    assert cond(built_in, "Admitted")["message"] == "the whole gang may start"
    assert not any(e.reason == "Admitted" for e in built_in.events)


def test_a_topology_request_fails_where_nobody_here_places_the_gang() -> None:
    packed = DDP.copy().with_spec(placement={"topology": {"required": "example.com/rack"}})
    assert run(packed).status["phase"] == "Starting"  # the built-in admission places it
    external = OperatorSettings(admission="external")
    by_external = AdmissionVerdict(by=AdmissionBackendName.EXTERNAL)
    p = plan(Observed(job=packed.obj(), pods=pods(), now=at(0), admission=by_external), external)
    assert p.status["phase"] == "Failed" and p.create == []
    failed = cond(p, "Failed")
    assert failed["reason"] == "InvalidSpec" and "spec.placement.topology" in failed["message"]
    assert "kueue.x-k8s.io/queue-name" in failed["message"]
    kueue = plan(
        Observed(job=packed.obj(), pods=pods(), now=at(0), admission=AdmissionVerdict(by=KUEUE)),
        external,
    )
    assert kueue.status["phase"] == "Starting"


def test_the_built_in_placement_domain_is_kept_in_the_status_until_queued_again() -> None:
    said = "the whole gang fits, placed in example.com/rack=r3"
    queued = after(DDP, admitted=False)
    p = run(queued, now=30, admitted_message=said, domain="example.com/rack=r3")
    assert p.status["admission"]["domain"] == "example.com/rack=r3"
    assert cond(p, "Admitted")["message"] == said
    # Its one Event is the backend's, once per admission (BuiltinBackend.admitted).
    assert not any(e.reason == "Admitted" for e in p.events)
    starting = queued.copy().with_full_status(p.status)
    # A restarted operator has no placement in memory: the status keeps what it said.
    later = run(starting, now=40)
    assert later.status["admission"]["domain"] == "example.com/rack=r3"
    assert cond(later, "Admitted")["message"] == said
    running = after(starting, pod(0, ready=True), pod(1, ready=True), now=45)
    victim = running.copy().with_full_status(
        run(running, pod(0, ready=True), pod(1, ready=True), now=50, stop="by urgent").status
    )
    assert victim.obj()["status"]["admission"]["domain"] == "example.com/rack=r3"
    waiting = run(victim, now=60, admitted=False, message="behind", queue_position=1)
    assert "domain" not in waiting.status["admission"]  # the next admission places it again
    patch = status_patch(victim.obj()["status"], waiting.status)
    assert patch["admission"] == {"backend": "builtin", "preemptions": 1, "domain": None}


def test_a_status_patch_removes_keys_dropped_at_any_depth() -> None:
    old = {"admission": {"preemptions": 1, "domain": "r"}, "progress": {"step": 3}, "x": 1}
    new = {"admission": {"preemptions": 1}, "progress": {"step": 4}}
    assert status_patch(old, new) == {
        "admission": {"preemptions": 1, "domain": None}, "progress": {"step": 4}, "x": None,
    }  # fmt: skip


def test_an_elastic_job_starts_at_the_size_it_was_admitted_with() -> None:
    """The gang is built at the admitted size (the ranks 0 .. size - 1, WORLD_SIZE of that
    size), the size is kept in status.elastic, and the job config stays the spec as
    written: the trainer sizes itself from WORLD_SIZE."""
    elastic = a_job().with_workers(4, gpus=4, minReplicas=2)
    queued = after(elastic, admitted=False)
    p = run(queued, now=30, elastic_size=3)
    pods_made = [m for m in p.create if m["kind"] == "Pod"]
    assert [m["metadata"]["name"] for m in pods_made] == [f"j-worker-{i}" for i in range(3)]
    env = {e["name"]: e.get("value") for e in pods_made[0]["spec"]["containers"][0]["env"]}
    assert env["WORLD_SIZE"] == "12"
    config = next(m for m in p.create if m["kind"] == "ConfigMap" and "config.json" in m["data"])
    assert json.loads(config["data"]["config.json"])["roles"]["worker"]["replicas"] == 4
    assert p.status["elastic"] == {"replicas": 3, "minReplicas": 2, "maxReplicas": 4,
                                   "resizes": 0}  # fmt: skip
    # A restarted operator knows the size from the status.
    starting = queued.copy().with_full_status(p.status)
    again = run(starting, now=40)
    assert again.status["elastic"]["replicas"] == 3
    assert not [m for m in again.create if m["metadata"]["name"] == "j-worker-3"]
    # Preempted and queued again, it is sized again at its next admission.
    gang = [a_pod(elastic, "worker", i).running().ready() for i in range(3)]
    running = after(starting, *gang, now=45)
    victim = running.copy().with_full_status(run(running, *gang, now=50, stop="by urgent").status)
    waiting = run(victim, now=60, admitted=False, message="behind")
    assert "replicas" not in waiting.status["elastic"]


def test_a_resize_restarts_the_gang_at_the_new_size_and_is_no_failure() -> None:
    elastic = a_job().with_workers(4, gpus=4, minReplicas=2)
    started = after(after(elastic, admitted=False), now=30, elastic_size=2)
    gang = [a_pod(elastic, "worker", i).running().ready() for i in range(2)]
    running = after(started, *gang, now=40)
    assert running.obj()["status"]["phase"] == "Running"
    why = "grew from 2 to 4 workers into free capacity"
    p = run(running, *gang, now=50, resize=(4, why))
    assert p.status["phase"] == "Restarting" and sorted(p.delete_pods) == [
        "j-worker-0",
        "j-worker-1",
    ]
    assert p.status["restarts"] == 1 and p.status.get("countedRestarts", 0) == 0
    assert p.status["elastic"]["replicas"] == 4 and p.status["elastic"]["resizes"] == 1
    assert p.status["elastic"]["lastResizeReason"] == why
    assert [e.reason for e in p.events] == ["Resized"] and why in p.events[0].message
    assert cond(p, "Restarting")["reason"] == "Resized"
    resized = running.copy().with_full_status(p.status)
    # Once the old pods are gone, the next generation is created at the new size.
    q = run(resized, now=60)
    made = sorted(m["metadata"]["name"] for m in q.create if m["kind"] == "Pod")
    assert made == [f"j-worker-{i}" for i in range(4)]
    again = run(resized, now=60, resize=(4, why))  # the same word again does nothing
    assert again.status["elastic"]["resizes"] == 1
    # A failure after it is the first in the backoff's count: it waits backoffSeconds (10).
    grown = resized.copy().with_full_status(q.status)
    new = [a_pod(elastic, "worker", i, generation=1).running().ready() for i in range(4)]
    up = after(grown, *new, now=70)
    new[3] = a_pod(elastic, "worker", 3, generation=1).failed(exit_code=137, finished_at=80)
    failed = run(up, *new, now=80)
    assert "gang restart 1 of at most 3 in 10s" in cond(failed, "Restarting")["message"]
