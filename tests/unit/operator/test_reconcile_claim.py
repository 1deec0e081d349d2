"""Which checkpoint claim the reconciler reads: only a name that could be an object's."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_operator.reconcile import checkpoint_claim_name, next_look


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"checkpoint": {"claimName": "ckpt"}}, "ckpt"),
        ({"checkpoint": {"claimName": "team.ckpt-1"}}, "team.ckpt-1"),
        ({"checkpoint": {}}, None),
        ({}, None),
        (None, None),
        ({"checkpoint": "ckpt"}, None),
        ({"checkpoint": {"claimName": 7}}, None),
        ({"checkpoint": {"claimName": ""}}, None),
        ({"checkpoint": {"claimName": "Upper"}}, None),
        ({"checkpoint": {"claimName": "a/b"}}, None),
        ({"checkpoint": {"claimName": "ckpt\n"}}, None),
        ({"checkpoint": {"claimName": "a" * 254}}, None),
    ],
)
def test_claim_name(spec: Any, expected: str | None) -> None:
    assert checkpoint_claim_name({"spec": spec}) == expected


def test_a_job_reading_an_unwatched_claim_is_looked_at_within_a_resync() -> None:
    assert next_look(60.0, True, 10.0) == 10.0  # a claim, or pods' Events, read each look
    assert next_look(3.0, True, 10.0) == 3.0  # an earlier timer of the planner stays
    assert next_look(None, True, 10.0) is None  # finished: nothing to look at
    assert next_look(60.0, False, 10.0) == 60.0  # everything it reads is watched
