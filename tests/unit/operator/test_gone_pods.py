"""The memory of deleted pods (gone_pods.py): by job, the newest state, for a while or
until the job is deleted, bounded;
and which of them are a gang's vanished members (policies/nodes.vanished_members)."""

from __future__ import annotations

from typing import Any

from dtjob_operator.gone_pods import GonePods
from dtjob_operator.policies.nodes import vanished_members
from helpers.clock import FakeClock


def pod(name: str, node: str = "n1", ns: str = "team", generation: int = 0) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "labels": {"dtjob.io/generation": str(generation)},
        },
        "spec": {"nodeName": node},
    }


def test_kept_by_job_newest_state_first_forgotten_after_a_while() -> None:
    clock = FakeClock()
    gone = GonePods(keep_seconds=60, clock=clock)
    gone.record("a", pod("a-worker-0", node="n1"))
    gone.record("b", pod("b-worker-0"))
    gone.record("a", pod("a-worker-0", ns="other"))
    clock.now = 30
    gone.record("a", pod("a-worker-0", node="n2"))  # deleted again: the newest state counts
    assert [p["spec"]["nodeName"] for p in gone.of("team", "a")] == ["n2"]
    assert [p["metadata"]["name"] for p in gone.of("team", "b")] == ["b-worker-0"]
    clock.now = 61  # the first records expire; the newer one of a-worker-0 stays
    assert gone.of("team", "b") == [] and gone.of("other", "a") == []
    assert [p["spec"]["nodeName"] for p in gone.of("team", "a")] == ["n2"]
    clock.now = 91
    assert gone.of("team", "a") == [] and len(gone) == 0


def test_bounded_the_oldest_forgotten_first() -> None:
    gone = GonePods(max_pods=3, clock=FakeClock())
    for i in range(5):
        gone.record("a", pod(f"a-worker-{i}"))
    assert sorted(p["metadata"]["name"] for p in gone.of("team", "a")) == [
        "a-worker-2",
        "a-worker-3",
        "a-worker-4",
    ]
    gone.record("a", {"metadata": {"name": "nameless-namespace"}})  # not a pod: ignored
    assert len(gone) == 3


def test_a_deleted_job_is_forgotten_at_once_and_the_others_kept() -> None:
    clock = FakeClock()
    gone = GonePods(keep_seconds=60, clock=clock)
    for i in range(3):
        gone.record("a", pod(f"a-worker-{i}"))
    gone.record("b", pod("b-worker-0"))
    gone.record("a", pod("a-worker-0", ns="other"))
    gone.forget("team", "a")
    assert gone.of("team", "a") == [] and len(gone) == 2  # nothing of it left to expire
    assert [p["metadata"]["name"] for p in gone.of("team", "b")] == ["b-worker-0"]
    assert [p["metadata"]["namespace"] for p in gone.of("other", "a")] == ["other"]
    gone.forget("team", "never-seen")
    assert len(gone) == 2


def test_vanished_members_are_this_generations_pods_no_present_pod_replaces() -> None:
    gone = [pod("j-worker-0", generation=1), pod("j-worker-1", generation=1), pod("j-worker-2")]
    present = [pod("j-worker-0", generation=1)]
    assert [p["metadata"]["name"] for p in vanished_members(gone, present, 1)] == ["j-worker-1"]
    assert vanished_members(gone, present, 2) == []
