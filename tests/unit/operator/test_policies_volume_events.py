"""A pod that hangs in ContainerCreating on a volume (policies/volume_events.py), which pods'
Events the executor reads (waiting.pods_to_ask), and what the job then says."""

from __future__ import annotations

from typing import Any

import pytest
from unit.operator.builders import JobBuilder, PodBuilder, at, iso, pods
from unit.operator.planning import DDP, SETTINGS, STARTING, condition, w

from dtjob_operator.lifecycle import Observed, Plan, plan
from dtjob_operator.policies.volume_events import is_creating, volume_failure
from dtjob_operator.policies.waiting import MAX_PODS_ASKED, pods_to_ask, why_not_running

SECRET = 'MountVolume.SetUp failed for volume "creds" : secret "nope" not found'
ATTACH = 'Multi-Attach error for volume "pvc-1" Volume is already used by pod(s) j-worker-0'
GENERIC = (
    "Unable to attach or mount volumes: unmounted volumes=[creds], unattached volumes=[]: "
    "timed out waiting for the condition"
)


def creating(index: int, generation: int = 0) -> PodBuilder:
    """Scheduled, its container waiting in ContainerCreating, as a kubelet reports it."""
    return w(index, generation).on_node("n1").waiting("ContainerCreating")


def event(
    pod: PodBuilder | dict[str, Any], reason: str, message: str = "", at_s: float = 10, **extra: Any
) -> dict[str, Any]:
    """A core/v1 Event about `pod` as the kubelet writes it (lastTimestamp moves on repeats)."""
    obj = pod.obj() if isinstance(pod, PodBuilder) else pod
    meta = obj["metadata"]
    return {
        "involvedObject": {"kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        "reason": reason,
        "message": message,
        "type": "Normal" if reason in ("Pulling", "Pulled", "Created", "Started") else "Warning",
        "lastTimestamp": iso(at_s),
        **extra,
    }


# -- which event still holds --------------------------------------------------------------


def test_a_failed_mount_is_the_answer() -> None:
    found = volume_failure(creating(0).obj(), [event(creating(0), "FailedMount", SECRET)])
    assert found is not None and (found.reason, found.message) == ("FailedMount", SECRET)


def test_a_multi_attach_error_is_the_answer() -> None:
    found = volume_failure(creating(1).obj(), [event(creating(1), "FailedAttachVolume", ATTACH)])
    assert (
        found is not None
        and found.reason == "FailedAttachVolume"
        and "Multi-Attach" in (found.message)
    )


def test_the_latest_failure_wins() -> None:
    events = [
        event(creating(0), "FailedMount", 'secret "old" not found', at_s=20),
        event(creating(0), "FailedMount", 'secret "new" not found', at_s=30),
        event(creating(0), "FailedMount", 'secret "older" not found', at_s=10),
    ]
    found = volume_failure(creating(0).obj(), events)
    assert found is not None and '"new"' in found.message


def test_the_specific_failure_beats_the_kubelets_later_summary() -> None:
    events = [
        event(creating(0), "FailedMount", SECRET, at_s=10),
        event(creating(0), "FailedMount", GENERIC, at_s=130),
    ]
    found = volume_failure(creating(0).obj(), events)
    assert found is not None and found.message == SECRET
    # Alone, the summary is still better than nothing.
    alone = volume_failure(creating(0).obj(), events[1:])
    assert alone is not None and alone.message == GENERIC


@pytest.mark.parametrize("progress", ["Pulling", "Pulled", "Created", "Started"])
def test_a_failure_the_kubelet_has_since_got_past_is_history(progress: str) -> None:
    # The secret was created meanwhile: the volume mounted and the image is being pulled,
    # which reads ContainerCreating too.
    events = [event(creating(0), "FailedMount", SECRET, at_s=10), event(creating(0), progress)]
    assert volume_failure(creating(0).obj(), events) is None  # same second: progress wins
    events[1]["lastTimestamp"] = iso(11)
    assert volume_failure(creating(0).obj(), events) is None
    # A failure after the progress (a second volume) holds again.
    events.append(event(creating(0), "FailedMount", SECRET, at_s=12))
    assert volume_failure(creating(0).obj(), events) is not None


def test_times_from_series_and_event_time_count() -> None:
    old = event(creating(0), "FailedMount", 'secret "old"', at_s=50)
    new = event(creating(0), "FailedMount", 'secret "new"', at_s=5)
    new["series"] = {"count": 3, "lastObservedTime": iso(60)[:-1] + ".000000Z"}
    found = volume_failure(creating(0).obj(), [old, new])
    assert found is not None and '"new"' in found.message
    micro = event(creating(0), "FailedMount", 'secret "micro"', at_s=0)
    del micro["lastTimestamp"]
    micro["eventTime"] = iso(70)[:-1] + ".123456Z"
    found = volume_failure(creating(0).obj(), [old, new, micro])
    assert found is not None and '"micro"' in found.message


def test_events_of_an_earlier_pod_of_the_same_name_are_ignored() -> None:
    earlier = creating(0, generation=0)
    now = creating(0, generation=1)
    assert volume_failure(now.obj(), [event(earlier, "FailedMount", SECRET)]) is None
    # An event that names no uid cannot be told apart: it counts.
    anonymous = event(now, "FailedMount", SECRET)
    del anonymous["involvedObject"]["uid"]
    assert volume_failure(now.obj(), [anonymous]) is not None


def test_other_reasons_say_nothing() -> None:
    events = [event(creating(0), "FailedScheduling", "0/3 nodes"), event(creating(0), "BackOff")]
    assert volume_failure(creating(0).obj(), events) is None


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (creating(0), True),
        (w(0).on_node("n1").waiting("PodInitializing"), True),
        (w(0).waiting("ContainerCreating"), False),  # not scheduled: not the kubelet's yet
        (w(0).on_node("n1"), False),  # no container status yet
        (w(0).on_node("n1").waiting("ImagePullBackOff"), False),
        (w(0).on_node("n1").running().ready(), False),
        (creating(0).terminating(), False),
    ],
)
def test_is_creating(pod: PodBuilder, expected: bool) -> None:
    assert is_creating(pod.obj()) is expected


def test_a_pod_no_longer_creating_has_no_volume_failure() -> None:
    running = w(0).on_node("n1").running()
    assert volume_failure(running.obj(), [event(running, "FailedMount", SECRET)]) is None


# -- which pods' Events are read ----------------------------------------------------------


def job_with(**status: Any) -> dict[str, Any]:
    return DDP.copy().with_status(**status).obj()


def test_only_the_current_gangs_creating_pods_are_asked_about() -> None:
    observed = pods(
        creating(1, generation=1),
        w(0, generation=1).on_node("n1").running().ready(),
        creating(0, generation=0).terminating(),  # the old gang, going
        w(2, generation=1),  # not scheduled
    )
    assert pods_to_ask(job_with(phase="Starting", restarts=1), observed) == ["j-worker-1"]


def test_no_pod_is_asked_about_once_the_job_is_finished() -> None:
    assert pods_to_ask(job_with(phase="Failed"), pods(creating(0))) == []
    assert pods_to_ask(job_with(phase="Starting"), pods(creating(0))) == ["j-worker-0"]


def test_no_pod_is_asked_about_when_a_container_problem_answers_already() -> None:
    observed = pods(creating(0), w(1).on_node("n1").waiting("ImagePullBackOff"))
    assert pods_to_ask(job_with(phase="Starting"), observed) == []


def test_a_large_gang_is_asked_about_in_name_order_up_to_the_cap() -> None:
    big = JobBuilder("j", "ns").with_workers(40, gpus=1)
    observed = [w(i, job=big).on_node("n1").waiting("ContainerCreating").obj() for i in range(40)]
    asked = pods_to_ask(big.copy().with_status(phase="Starting").obj(), observed)
    assert len(asked) == MAX_PODS_ASKED
    assert asked == sorted(asked) and "j-worker-0" in asked


# -- what the job says ----------------------------------------------------------------------


def test_why_not_running_names_the_pod_and_the_kubelets_message() -> None:
    gang = [w(0).on_node("n1").running().ready().obj(), creating(1).obj()]
    found = why_not_running(gang, {"j-worker-1": [event(creating(1), "FailedMount", SECRET)]})
    assert found is not None and found.reason == "FailedMount"
    assert found.message.startswith("pod j-worker-1 is waiting for its volumes: FailedMount: ")
    assert 'secret "nope" not found' in found.message


def test_a_long_message_is_cut() -> None:
    long = f'Multi-Attach error for volume "pvc-1" Volume is already used by pod(s) {"x, " * 500}'
    found = why_not_running(
        [creating(0).obj()], {"j-worker-0": [event(creating(0), "FailedAttachVolume", long)]}
    )
    assert found is not None and len(found.message) < 500 and found.message.endswith("...")


def test_container_problems_first_then_volumes_then_scheduling() -> None:
    events = {"j-worker-1": [event(creating(1), "FailedMount", SECRET)]}
    unschedulable = w(0).unschedulable("0/4 nodes are available")
    found = why_not_running([unschedulable.obj(), creating(1).obj()], events)
    assert found is not None and found.reason == "FailedMount"
    pulling = w(0).on_node("n1").waiting("ImagePullBackOff")
    found = why_not_running([pulling.obj(), creating(1).obj()], events)
    assert found is not None and found.reason == "ImagePullBackOff"
    assert why_not_running([creating(1).obj()]) is None  # nothing read: still starting


def step(job: JobBuilder, *observed: PodBuilder, events: dict[str, Any], now: float) -> Plan:
    return plan(
        Observed(job=job.obj(), pods=pods(*observed), pod_events=events, now=at(now)), SETTINGS
    )


def test_the_job_says_failed_mount_in_its_condition_reason_and_one_event_per_change() -> None:
    gang = (w(0).on_node("n1").running().ready(), creating(1))
    events = {"j-worker-1": [event(creating(1), "FailedMount", SECRET)]}
    first = step(STARTING, *gang, events=events, now=2)
    running = condition(first, "Running")
    assert running["reason"] == "FailedMount" and first.status["reason"] == "FailedMount"
    assert running["message"].startswith("1/2 pods ready: pod j-worker-1 is waiting")
    assert 'secret "nope" not found' in running["message"]
    assert [e.reason for e in first.events] == ["FailedMount"]
    again = STARTING.copy().with_full_status(first.status)
    assert step(again, *gang, events=events, now=4).events == []
    # The secret appeared: the kubelet pulls the image; the job says nothing specific again.
    events["j-worker-1"].append(event(creating(1), "Pulling", at_s=20))
    later = step(again, *gang, events=events, now=21)
    assert condition(later, "Running")["reason"] == "PodsNotReady"


def test_pods_ready_timeout_then_fails_with_failed_mount() -> None:
    timeout = SETTINGS.pods_ready_timeout_seconds
    job = DDP.copy().with_run_policy(admissionRetryLimit=0)
    starting = job.copy().with_full_status(step(job, events={}, now=0).status)
    stuck = (creating(0).created(0), creating(1).created(0))
    events = {p.name: [event(p, "FailedMount", SECRET)] for p in stuck}
    failed = step(starting, *stuck, events=events, now=timeout + 1)
    assert failed.status["phase"] == "Failed" and failed.status["reason"] == "FailedMount"
    message = condition(failed, "Failed")["message"]
    assert "admissionRetryLimit" in message and 'secret "nope" not found' in message
    assert "pod j-worker-0" in message
