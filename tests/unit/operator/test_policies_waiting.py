"""Why a gang is not running (policies/waiting.py), and what the job then says."""

from __future__ import annotations

import pytest
from unit.operator.builders import PodBuilder, a_job, a_pod, at, pods
from unit.operator.planning import DDP, SETTINGS, STARTING, after, condition, run, w

from dtjob_api.status import AdmissionBackendName
from dtjob_operator.admission.seam import AdmissionVerdict
from dtjob_operator.lifecycle import Observed, plan
from dtjob_operator.policies.waiting import why_not_running
from dtjob_operator.settings import OperatorSettings

JOB = a_job()
PULL = 'Back-off pulling image "registry.invalid/x:1"'
NO_NODE = "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."


def p(index: int) -> PodBuilder:
    return a_pod(JOB, "worker", index)


@pytest.mark.parametrize(
    ("pods", "reason", "has"),
    [
        (
            [p(0).running().ready(), p(1).waiting("ImagePullBackOff", PULL)],
            "ImagePullBackOff",
            ("pod j-worker-1 container trainer", "registry.invalid/x:1"),
        ),
        ([p(0).waiting("ErrImagePull")], "ErrImagePull", ("j-worker-0",)),
        ([p(0).waiting("CrashLoopBackOff", "back-off 5m0s")], "CrashLoopBackOff", ("back-off",)),
        (
            [p(0).waiting("CreateContainerConfigError", 'secret "s" not found')],
            "CreateContainerConfigError",
            ('secret "s" not found',),
        ),
        (
            [p(0).unschedulable(NO_NODE), p(1)],
            "Unschedulable",
            ("pod j-worker-0 cannot be scheduled", "Insufficient nvidia.com/gpu"),
        ),
        # A container problem is worth more than a scheduling one; then by pod name.
        ([p(0).unschedulable(NO_NODE), p(1).waiting("ImagePullBackOff")], "ImagePullBackOff", ()),
        ([p(1).waiting("CrashLoopBackOff"), p(0).waiting("ErrImagePull")], "ErrImagePull", ()),
    ],
)
def test_why_not_running(pods: list[PodBuilder], reason: str, has: tuple[str, ...]) -> None:
    found = why_not_running([b.obj() for b in pods])
    assert found is not None and found.reason == reason
    for text in has:
        assert text in found.message


@pytest.mark.parametrize(
    "pods",
    [
        [p(0)],  # just created
        [p(0).waiting("ContainerCreating")],  # progress, not a problem
        [p(0).running().ready()],
    ],
)
def test_nothing_to_say(pods: list[PodBuilder]) -> None:
    assert why_not_running([b.obj() for b in pods]) is None


def test_the_job_says_why_in_its_condition_and_reason_and_one_event_per_change() -> None:
    first = run(STARTING, w(0).running().ready(), w(1).waiting("ImagePullBackOff", PULL), now=2)
    running = condition(first, "Running")
    assert running["reason"] == "ImagePullBackOff"
    assert running["message"].startswith("1/2 pods ready: pod j-worker-1 container trainer")
    assert first.status["reason"] == "ImagePullBackOff"  # the REASON column
    assert [e.reason for e in first.events] == ["ImagePullBackOff"]
    again = after(STARTING, w(0).running().ready(), w(1).waiting("ImagePullBackOff", PULL), now=2)
    p2 = run(again, w(0).running().ready(), w(1).waiting("ImagePullBackOff", PULL), now=4)
    assert p2.events == []
    p3 = run(again, w(0).running().ready(), w(1).waiting("ErrImagePull"), now=6)
    assert [e.reason for e in p3.events] == ["ErrImagePull"]


def test_pods_ready_timeout_requeues_up_to_the_limit_then_fails_with_the_pods_reason() -> None:
    timeout = SETTINGS.pods_ready_timeout_seconds
    job = DDP.copy().with_run_policy(admissionRetryLimit=1)
    stuck = (w(0).running().ready().created(0), w(1).waiting("ImagePullBackOff", PULL).created(0))
    starting = after(job, now=0)
    p1 = run(starting, *stuck, now=timeout + 1)
    assert p1.status["phase"] == "Queued"
    assert p1.status["admission"]["requeues"] == 1
    assert "ImagePullBackOff" in condition(p1, "Admitted")["message"]
    # Admitted again, the second gang is stuck the same way: the limit (1) is spent.
    second = after(job.copy().with_full_status(p1.status), now=timeout + 100)
    stuck = (
        w(0).running().ready().created(timeout + 100),
        w(1).waiting("ImagePullBackOff", PULL).created(timeout + 100),
    )
    p2 = run(second, *stuck, now=2 * timeout + 101)
    assert p2.status["phase"] == "Failed"
    failed = condition(p2, "Failed")
    assert failed["reason"] == "ImagePullBackOff"
    assert (
        "admissionRetryLimit" in failed["message"] and "registry.invalid/x:1" in failed["message"]
    )
    assert p2.status["reason"] == "ImagePullBackOff"
    assert sorted(p2.delete_pods) == ["j-worker-0", "j-worker-1"]  # nothing keeps its GPUs


def test_external_admission_still_has_a_pods_ready_timeout() -> None:

    settings = OperatorSettings(admission="external")
    timeout = settings.pods_ready_timeout_seconds
    job = DDP.copy().with_run_policy(admissionRetryLimit=1)

    external = AdmissionVerdict(by=AdmissionBackendName.EXTERNAL)

    def step(j, *observed, now):  # type: ignore[no-untyped-def]
        return plan(
            Observed(job=j.obj(), pods=pods(*observed), now=at(now), admission=external), settings
        )

    stuck = (w(0).waiting("ErrImagePull").created(0), w(1).waiting("ErrImagePull").created(0))
    starting = job.copy().with_full_status(step(job, now=0).status)
    p1 = step(starting, *stuck, now=timeout + 1)
    assert p1.status["phase"] == "Pending" and sorted(p1.delete_pods) == [
        "j-worker-0",
        "j-worker-1",
    ]
    assert "gang re-created" in condition(p1, "Running")["message"]
    # Once the old pods are gone the same generation is created again.
    pending = job.copy().with_full_status(p1.status)
    p2 = step(pending, now=timeout + 5)
    assert p2.status["phase"] == "Starting"
    assert [m["metadata"]["name"] for m in p2.create if m["kind"] == "Pod"] == [
        "j-worker-0",
        "j-worker-1",
    ]
    again = job.copy().with_full_status(p2.status)
    stuck = tuple(w(i).waiting("ErrImagePull").created(timeout + 5) for i in range(2))
    p3 = step(again, *stuck, now=2 * timeout + 6)
    assert p3.status["phase"] == "Failed" and condition(p3, "Failed")["reason"] == "ErrImagePull"
