"""The planner's check of a spec, made once per spec (operator/validated.py): the same
spec and guard rails give the verdict validate_job gives, from the memo, whatever the
job's name (checked apart); a changed spec or other rails are checked anew."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_api.guard_rails import DEFAULT_RAILS, GuardRails
from dtjob_api.validation import validate_job
from dtjob_operator import validated
from dtjob_operator.validated import spec_errors


def spec(**worker: Any) -> dict[str, Any]:
    return {"strategy": {"type": "DataParallel"},
            "roles": {"worker": {"replicas": 2, "gpus": 1, **worker}}}  # fmt: skip


HOST_PATH = {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/data"}}],
                      "containers": [{"name": "trainer"}]}}  # fmt: skip


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Each call that reached validate_job, with a memo of its own."""
    seen: list[object] = []

    def counted(s: Any, name: Any = None, *, rails: Any = DEFAULT_RAILS) -> Any:
        seen.append((name, rails))
        return validate_job(s, name, rails=rails)

    monkeypatch.setattr(validated, "validate_job", counted)
    monkeypatch.setattr(validated, "_kept", {})
    return seen


def test_the_same_spec_is_checked_once_and_gets_the_same_verdict(checks: list[object]) -> None:
    bad = spec(replicas=0)
    first = spec_errors(bad, "j", DEFAULT_RAILS)
    assert first == validate_job(bad, "j", rails=DEFAULT_RAILS) and first
    first.clear()  # the caller's list is its own
    again = spec_errors({**bad}, "j", DEFAULT_RAILS)  # equal, another object
    assert again == validate_job(bad, "j", rails=DEFAULT_RAILS)
    assert len(checks) == 1


def test_a_changed_spec_or_other_rails_are_checked_anew_and_names_apart(
    checks: list[object],
) -> None:
    held = spec(template=HOST_PATH)
    refused = spec_errors(held, "j", DEFAULT_RAILS)
    assert [e.field for e in refused] == ["spec.roles.worker.template.spec.volumes[0].hostPath"]
    assert spec_errors(held, "j", GuardRails(allow_host_path=True)) == []
    assert spec_errors(held, "j", None) == []  # a started job: no rails
    assert spec_errors(spec(), "j", DEFAULT_RAILS) == []
    assert [e.field for e in spec_errors(spec(), "Not_A_Name", DEFAULT_RAILS)] == [
        "metadata.name"]  # fmt: skip
    assert spec_errors(spec(), "Not_A_Name", DEFAULT_RAILS) == validate_job(
        spec(), "Not_A_Name", rails=DEFAULT_RAILS)  # fmt: skip
    assert len(checks) == 4  # the last two specs were the fourth's


def test_a_spec_that_is_not_json_is_checked_every_time(checks: list[object]) -> None:
    odd = {**spec(), "extra": object()}
    assert spec_errors(odd, "j", DEFAULT_RAILS) == spec_errors(odd, "j", DEFAULT_RAILS)
    assert len(checks) == 2
