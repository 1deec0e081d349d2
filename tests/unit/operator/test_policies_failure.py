"""Failure policy: exit-code classification, the earliest failure decides, messages."""

from __future__ import annotations

import pytest
from unit.operator.builders import PodBuilder, a_job, a_pod, pods

from dtjob_api.spec import RunPolicy
from dtjob_operator.policies.failure_policy import (
    gang_failures,
    is_retryable,
    judge,
    judge_failures,
    observe_failure,
)

JOB = a_job().with_workers(3)


def worker(index: int, generation: int = 0) -> PodBuilder:
    return a_pod(JOB, "worker", index, generation)


def failed_with(code: int, **policy: object) -> bool:
    failure = observe_failure(worker(0).failed(exit_code=code).obj())
    assert failure is not None
    return is_retryable(failure, RunPolicy.model_validate(policy))


CLASSIFICATION = [
    # (exit code, runPolicy fields, retryable)
    (1, {}, False),
    (2, {}, False),
    (127, {}, False),
    (128, {}, True),
    (137, {}, True),
    (143, {}, True),
    (200, {}, True),
    (201, {}, True),
    (1, {"retryableExitCodes": [1]}, True),
    (137, {"permanentExitCodes": [137]}, False),
    (3, {"retryableExitCodes": [1]}, False),
    (1, {"restartPolicy": "OnFailure"}, True),
    (137, {"restartPolicy": "Never"}, False),
    # Override lists only speak for the ExitCode policy.
    (1, {"restartPolicy": "Never", "retryableExitCodes": [1]}, False),
]


@pytest.mark.parametrize(("code", "policy", "retryable"), CLASSIFICATION)
def test_exit_code_classification(code: int, policy: dict, retryable: bool) -> None:
    assert failed_with(code, **policy) is retryable


def test_pod_failed_without_exit_code_is_retryable_except_under_never() -> None:
    failure = observe_failure(worker(0).evicted().obj())
    assert failure is not None and failure.exit_code is None and failure.reason == "Evicted"
    assert is_retryable(failure, RunPolicy())
    assert not is_retryable(failure, RunPolicy(restartPolicy="Never"))


@pytest.mark.parametrize(
    "pod",
    [worker(0), worker(0).running().ready(), worker(0).succeeded()],
    ids=["pending", "running", "succeeded"],
)
def test_healthy_pods_are_no_failures(pod: PodBuilder) -> None:
    assert observe_failure(pod.obj()) is None


def test_nonzero_exit_counts_before_the_pod_phase_turns_failed() -> None:
    pod = worker(0).failed(exit_code=137).obj()
    pod["status"]["phase"] = "Running"
    failure = observe_failure(pod)
    assert failure is not None and failure.exit_code == 137


EARLIEST = [
    (
        "earliest permanent wins over later retryable",
        [worker(0).failed(1, finished_at=10), worker(1).failed(137, finished_at=11)],
        ("j-worker-0", False),
    ),
    (
        "earliest retryable wins over later permanent (the later one is a consequence)",
        [worker(0).failed(1, finished_at=12), worker(1).failed(137, finished_at=11)],
        ("j-worker-1", True),
    ),
    (
        "a lost peer never decides while another failure exists, even an earlier one",
        [worker(0).failed(3, finished_at=12), worker(1).failed(201, finished_at=11)],
        ("j-worker-0", False),
    ),
    (
        "lost peers alone: the earliest decides (retryable)",
        [worker(0).failed(201, finished_at=12), worker(1).failed(201, finished_at=11)],
        ("j-worker-1", True),
    ),
    (
        "a tie goes to the permanent failure",
        [worker(0).failed(137, finished_at=10), worker(2).failed(1, finished_at=10)],
        ("j-worker-2", False),
    ),
    (
        "a failure without a time comes after timed ones",
        [worker(0).evicted(), worker(1).failed(137, finished_at=50)],
        ("j-worker-1", True),
    ),
]


@pytest.mark.parametrize(
    ("failed", "expected"), [e[1:] for e in EARLIEST], ids=[e[0] for e in EARLIEST]
)
def test_the_earliest_failure_decides(failed: list[PodBuilder], expected: tuple) -> None:
    healthy = a_pod(JOB, "worker", 7).running().ready()  # a bystander never decides
    verdict = judge_failures([*pods(*failed), healthy.obj()], RunPolicy())
    assert verdict is not None
    assert (verdict.failure.pod, verdict.retryable) == expected


def test_verdict_does_not_depend_on_pod_order() -> None:
    a, b = worker(0).failed(137, finished_at=10), worker(1).failed(1, finished_at=10)
    v1 = judge_failures(pods(a, b), RunPolicy())
    v2 = judge_failures(pods(b, a), RunPolicy())
    assert v1 == v2


REASONS = [
    (143, "Preempted"),
    (200, "RendezvousTimeout"),
    (201, "PeerLost"),
    (137, "PodFailedRetryable"),
    (1, "PodFailedPermanent"),
]


@pytest.mark.parametrize(("code", "reason"), REASONS)
def test_condition_reason_per_exit_code(code: int, reason: str) -> None:
    verdict = judge_failures(pods(worker(1).failed(exit_code=code)), RunPolicy())
    assert verdict is not None and verdict.reason == reason


def test_message_names_pod_container_code_meaning_and_policy() -> None:
    verdict = judge_failures(pods(worker(1).failed(exit_code=1)), RunPolicy())
    assert verdict is not None
    assert verdict.message == (
        "pod j-worker-1 exited with code 1 in container trainer: unexpected error "
        "(permanent under restartPolicy ExitCode)"
    )


def test_message_carries_the_end_of_the_termination_message() -> None:
    log = "Traceback (most recent call last):\n  File x\nValueError: spec.trainer.batchSize bad\n"
    pod = worker(0).failed(exit_code=2, message=log)
    verdict = judge_failures(pods(pod), RunPolicy())
    assert verdict is not None
    assert "invalid job config" in verdict.message
    assert verdict.message.endswith("ValueError: spec.trainer.batchSize bad")


def test_oom_kill_is_named() -> None:
    verdict = judge_failures(pods(worker(0).failed(137, reason="OOMKilled")), RunPolicy())
    assert verdict is not None and "out of memory (OOMKilled)" in verdict.message
    assert verdict.retryable


def test_no_failures_no_verdict() -> None:
    assert judge([], RunPolicy()) is None
    assert judge_failures(pods(worker(0).running()), RunPolicy()) is None


MEMBERS = ["j-worker-0", "j-worker-1"]


def test_gang_failures_before_start_ignore_terminating_and_missing_pods() -> None:
    # Resuming after a suspend: the old pods exit 143 while being deleted; no failure.
    observed = pods(worker(0).failed(143).terminating())
    assert gang_failures(observed, 0, MEMBERS, started=False) == []


def test_gang_failures_once_started_count_deleted_and_missing_members() -> None:
    observed = pods(worker(0).running().terminating(since=30))
    failures = gang_failures(observed, 0, MEMBERS, started=True)
    assert sorted(f.pod for f in failures) == MEMBERS
    assert all(f.exit_code is None and f.reason == "Deleted" for f in failures)
    verdict = judge(failures, RunPolicy())
    assert verdict is not None and verdict.retryable
    assert verdict.failure.pod == "j-worker-0"  # the one with a time comes first


def test_gang_failures_only_look_at_the_current_generation() -> None:
    observed = pods(worker(0, generation=0).failed(1), worker(0, generation=1).running())
    failures = gang_failures(observed, 1, ["j-worker-0"], started=True)
    assert failures == []
