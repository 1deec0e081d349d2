"""Whom a stall points at, from rank 0's heartbeat summary (policies/stall_blame.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_operator.policies.stall_blame import blame, pod_of_rank, straggler_slowdown


def pod(name: str, first_rank: int, node: str | None = "n1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {"dtjob.io/rank": str(first_rank)}},
        "spec": {"nodeName": node} if node else {},
    }


GANG = [pod("j-worker-0", 0, "n1"), pod("j-worker-1", 4, "n2"), pod("j-worker-2", 8, None)]


@pytest.mark.parametrize(
    ("rank", "name"),
    [(0, "j-worker-0"), (3, "j-worker-0"), (4, "j-worker-1"), (7, "j-worker-1"), (9, "j-worker-2")],
)
def test_a_rank_is_in_the_pod_whose_first_rank_is_the_largest_not_above_it(
    rank: int, name: str
) -> None:
    found = pod_of_rank(rank, GANG)
    assert found is not None and found["metadata"]["name"] == name


@pytest.mark.parametrize(
    ("progress", "said"),
    [
        (
            {
                "ranks": {
                    "behind": [
                        {
                            "rank": 5,
                            "step": 1200,
                            "lastStepAgo": 612.4,
                            "waitingIn": "sleep (x.py:3)",
                        },
                        {"rank": 0, "step": 1200, "lastStepAgo": 600},
                    ]
                }
            },
            "rank 5 (pod j-worker-1 on node n2) stopped first, at step 1200, 612s ago, "
            "waiting in sleep (x.py:3)",
        ),
        ({"ranks": {"behind": [{"rank": 9, "step": -1}]}}, "rank 9 (pod j-worker-2) stopped first"),
    ],
)
def test_the_first_rank_behind_is_named_with_its_pod_node_step_and_call(
    progress: dict[str, Any], said: str
) -> None:
    assert blame(progress, GANG) == said


@pytest.mark.parametrize(
    "progress",
    [
        None,
        {},
        {"step": 3},  # a trainer without heartbeats
        {"ranks": {"behind": []}},
        {"ranks": {"behind": [{"step": 3}]}},  # no rank
        {"ranks": {"behind": ["rank 3"]}},  # a malformed summary is ignored
        {"ranks": "all of them"},
    ],
)
def test_without_a_usable_summary_nobody_is_blamed(progress: dict[str, Any] | None) -> None:
    assert blame(progress, GANG) is None


@pytest.mark.parametrize(
    ("progress", "slowdown"),
    [
        (
            {"ranks": {"stragglers": [{"rank": 2, "slowdown": 1.8}, {"rank": 5, "slowdown": 3.1}]}},
            3.1,
        ),
        ({"ranks": {"stragglers": []}}, None),
        ({"ranks": {"stragglers": [{"rank": 2, "slowdown": "fast"}, "x"]}}, None),
        ({"step": 4}, None),
        (None, None),
    ],
)
def test_the_slowest_straggler_is_the_gauges_value(
    progress: dict[str, Any] | None, slowdown: float | None
) -> None:
    assert straggler_slowdown(progress) == slowdown
