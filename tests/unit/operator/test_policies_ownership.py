"""Whether an object in the way of a child's create may be used (policies/ownership.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_operator.policies.ownership import ownership_conflict


def sa(*owners: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "j-trainer", "ownerReferences": list(owners)}}


THIS = {"kind": "DistributedTrainingJob", "name": "j", "uid": "new"}
EARLIER = {"kind": "DistributedTrainingJob", "name": "j", "uid": "old"}
OTHER_JOB = {"kind": "DistributedTrainingJob", "name": "k", "uid": "k1"}
DEPLOY = {"kind": "Deployment", "name": "web", "uid": "d1"}


@pytest.mark.parametrize(
    ("existing", "has"),
    [
        (sa(EARLIER), ("earlier job named j", "uid old", "garbage collector")),
        (sa(), ("not owned by this job (no owner)", "delete the ServiceAccount")),
        (sa(OTHER_JOB), ("DistributedTrainingJob k",)),
        (sa(DEPLOY), ("Deployment web",)),
        (None, ("gone now",)),
    ],
)
def test_not_this_jobs_object_is_never_used(
    existing: dict[str, Any] | None, has: tuple[str, ...]
) -> None:
    error = ownership_conflict(existing, "ServiceAccount", "j-trainer", "j", "new")
    assert error is not None and error.code == 409 and not error.permanent
    text = error.describe()
    assert text.startswith("ServiceAccount j-trainer")
    for part in has:
        assert part in text


@pytest.mark.parametrize("owners", [[THIS], [DEPLOY, THIS]])
def test_this_jobs_object_is_adopted(owners: list[dict[str, str]]) -> None:
    assert ownership_conflict(sa(*owners), "ServiceAccount", "j-trainer", "j", "new") is None
