"""Exit codes behind torchrun: the child's code decides, read from the termination message.

The fixtures are what torchrun 2.13 really wrote (CPU, two children, one failing): its
error file (TORCHELASTIC_ERROR_FILE) or the last 2048 bytes of its log, which the kubelet
makes the termination message under FallbackToLogsOnError.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from unit.operator.builders import a_job, a_pod

from dtjob_api.spec import RunPolicy
from dtjob_operator.constants import (
    REASON_POD_FAILED_RETRYABLE,
    REASON_PREEMPTED,
    REASON_RENDEZVOUS_TIMEOUT,
)
from dtjob_operator.policies.failure_policy import is_retryable, judge, observe_failure
from dtjob_operator.policies.launcher_exit import ChildExit, child_exit

FIXTURES = Path(__file__).parent / "fixtures" / "torchrun"
JOB = a_job().with_workers(2)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_log_tail_names_the_root_cause_child_and_its_code() -> None:
    # A child that called sys.exit(75) writes no error file: only the log says it.
    assert child_exit(fixture("log-tail-child-exit-75.txt")) == ChildExit(75, 1)


def test_a_child_killed_by_a_signal_counts_as_128_plus_signal() -> None:
    assert child_exit(fixture("log-tail-child-sigkill.txt")) == ChildExit(137, 1)


def test_error_file_of_a_child_exception_gives_its_error_code_and_message() -> None:
    child = child_exit(fixture("error-file-child-raised.json"))
    assert child == ChildExit(1, None, error="RuntimeError: boom on rank 1")


def test_torchrun_stopped_by_sigterm_counts_as_143() -> None:
    child = child_exit(fixture("error-file-sigterm.json"))
    assert child is not None
    assert (child.exit_code, child.launcher_failure) == (143, "was stopped by signal 15")


def test_torchrun_unable_to_reach_rank_0_counts_as_a_rendezvous_timeout() -> None:
    child = child_exit(fixture("error-file-rendezvous-timeout.json"))
    assert child is not None
    assert (child.exit_code, child.launcher_failure) == (
        200,
        "timed out reaching rank 0's rendezvous",
    )
    assert child.error is not None and child.error.startswith("DistNetworkError: The client")


def test_dtjob_run_error_file_carries_the_rank() -> None:
    body = {"message": {"message": "child failed", "errorCode": 75, "extraInfo": {"rank": "3"}}}
    assert child_exit(json.dumps(body)) == ChildExit(75, 3, error="child failed")


def test_error_file_cut_short_by_the_kubelet_is_still_read() -> None:
    text = '{"message": {"errorCode": 75, "extraInfo": {"rank": "2", "py_callstack": "Trace'
    assert child_exit(text) == ChildExit(75, 2)
    cut = fixture("error-file-sigterm.json")[:200]
    assert child_exit(cut) == ChildExit(
        143, None, "was stopped by signal 15", "SignalException: Process 13214 got signal: 15"
    )


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "Traceback (most recent call last):\nValueError: bad config",
        '{"message": {"message": "RendezvousTimeoutError: ", "extraInfo": {}}}',
        "{not json and no fields",
    ],
)
def test_other_messages_are_not_read_as_a_launcher_child(message: str | None) -> None:
    assert child_exit(message) is None


def test_retryable_child_code_survives_torchrun_exit_1() -> None:
    pod = a_pod(JOB, "worker", 1).failed(exit_code=1, message=fixture("log-tail-child-exit-75.txt"))
    failure = observe_failure(pod.obj())
    assert failure is not None
    assert (failure.exit_code, failure.container_exit_code, failure.child_rank) == (75, 1, 1)
    policy = RunPolicy(retryableExitCodes=[75])
    verdict = judge([failure], policy)
    assert verdict is not None and verdict.retryable
    assert verdict.reason == REASON_POD_FAILED_RETRYABLE
    assert verdict.message.startswith(
        "pod j-worker-1: child process (rank 1) exited with code 75 under torchrun "
        "(container exit 1) in container trainer: error (retryable under restartPolicy ExitCode)"
    ), verdict.message
    # Without the child's code the same pod would have been a permanent failure.
    assert not is_retryable(failure.__class__(**{**failure.__dict__, "exit_code": 1}), policy)


def test_torchrun_stopped_by_sigterm_is_retryable_as_preempted() -> None:
    pod = a_pod(JOB, "worker", 0).failed(exit_code=1, message=fixture("error-file-sigterm.json"))
    failure = observe_failure(pod.obj())
    assert failure is not None and failure.exit_code == 143
    verdict = judge([failure], RunPolicy())
    assert verdict is not None and verdict.retryable and verdict.reason == REASON_PREEMPTED
    assert "torchrun was stopped by signal 15, counted as code 143 (container exit 1)" in (
        verdict.message
    )


def test_torchrun_rendezvous_timeout_is_retryable() -> None:
    pod = a_pod(JOB, "worker", 1).failed(
        exit_code=1, message=fixture("error-file-rendezvous-timeout.json")
    )
    verdict = judge([observe_failure(pod.obj())], RunPolicy())  # type: ignore[list-item]
    assert verdict is not None and verdict.retryable
    assert verdict.reason == REASON_RENDEZVOUS_TIMEOUT
    assert "torchrun timed out reaching rank 0's rendezvous, counted as code 200" in (
        verdict.message
    )
    assert verdict.message.endswith("trying to connect to (127.0.0.1, 54065).")


def test_child_exception_stays_permanent_and_shows_its_error() -> None:
    pod = a_pod(JOB, "worker", 0).failed(
        exit_code=1, message=fixture("error-file-child-raised.json")
    )
    verdict = judge([observe_failure(pod.obj())], RunPolicy())  # type: ignore[list-item]
    assert verdict is not None and not verdict.retryable
    assert verdict.message.endswith(": RuntimeError: boom on rank 1"), verdict.message


def test_plain_container_failure_is_unchanged() -> None:
    pod = a_pod(JOB, "worker", 0).failed(exit_code=75, message="Traceback\nValueError: x")
    failure = observe_failure(pod.obj())
    assert failure is not None
    assert (failure.exit_code, failure.container_exit_code) == (75, None)


def test_an_error_file_without_a_code_shows_its_error_not_its_json() -> None:
    body = {"message": {"message": "ValueError: bad flag", "extraInfo": {"py_callstack": "T"}}}
    pod = a_pod(JOB, "worker", 0).failed(exit_code=1, message=json.dumps(body))
    failure = observe_failure(pod.obj())
    assert failure is not None
    assert (failure.exit_code, failure.container_exit_code) == (1, None)
    assert failure.detail == "ValueError: bad flag"


def test_an_error_file_cut_short_still_shows_its_error() -> None:
    # The kubelet keeps 4096 bytes; a long traceback loses the JSON's end (and errorCode).
    cut = fixture("error-file-child-raised.json")[:120]
    pod = a_pod(JOB, "worker", 0).failed(exit_code=1, message=cut)
    failure = observe_failure(pod.obj())
    assert failure is not None and failure.detail == "RuntimeError: boom on rank 1"


def test_two_failed_children_the_root_cause_decides() -> None:
    # Captured here: rank 1 exited 75 and rank 0 died of it in the same second (exit 1,
    # an unhandled collective error); torchrun named rank 0 the root cause.
    assert child_exit(fixture("log-tail-two-children-root-exit-1.txt")) == ChildExit(1, 0)


def test_a_root_cause_that_only_lost_a_peer_gives_way_to_the_peer_that_failed() -> None:
    # The same summary with rank 0 exiting 201 (the contract's "lost a peer"), as
    # examples/custom-image/train.py and the bundled trainer do: rank 1's 75 decides.
    assert child_exit(fixture("log-tail-two-children-root-lost-peer.txt")) == ChildExit(75, 1)
