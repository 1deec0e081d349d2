"""A lost peer (exit 201) alone does not decide while another pod of the gang still runs:
the failure that caused it is given time to show, so the verdict names the real one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dtjob_operator.policies.failure_policy import PodFailure
from dtjob_operator.policies.peer_lost import PEER_LOST_GRACE_SECONDS, peer_lost_wait

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def failure(code: int, pod: str = "j-worker-1") -> PodFailure:
    return PodFailure(pod, "trainer", code, T0, "Error", None)


def pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


GANG = [pod("j-worker-0", "Running"), pod("j-worker-1", "Failed")]


def test_a_lost_peer_waits_while_a_peer_still_runs_then_decides() -> None:
    assert peer_lost_wait(failure(201), GANG, T0 + timedelta(seconds=5)) == (
        PEER_LOST_GRACE_SECONDS - 5
    )
    late = T0 + timedelta(seconds=PEER_LOST_GRACE_SECONDS + 1)
    assert peer_lost_wait(failure(201), GANG, late) is None


def test_any_other_failure_or_a_gang_all_ended_decides_at_once() -> None:
    assert peer_lost_wait(failure(75), GANG, T0) is None
    assert peer_lost_wait(failure(3), GANG, T0) is None
    ended = [pod("j-worker-0", "Failed"), pod("j-worker-1", "Failed")]
    assert peer_lost_wait(failure(201), ended, T0) is None
    unknown = PodFailure("j-worker-1", "trainer", 201, None, "Error", None)
    assert peer_lost_wait(unknown, GANG, T0) is None
