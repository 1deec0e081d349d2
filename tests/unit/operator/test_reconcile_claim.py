"""Which checkpoint claim the reconciler reads: only a name that could be an object's."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_operator.reconcile import checkpoint_claim_name


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
