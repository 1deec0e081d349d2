"""A job nested too deeply to plan is failed with InvalidSpec, measured without recursion."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from dtjob_operator.constants import CONDITION_FAILED, REASON_INVALID_SPEC
from dtjob_operator.policies.too_deep import too_deep_message, too_deep_path, too_deep_status

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def nested(levels: int) -> dict[str, Any]:
    # Built from JSON text, the way such a job reaches the operator.
    value: dict[str, Any] = json.loads('{"a":' * levels + "1" + "}" * levels)
    return value


def test_depth_of_an_object_as_deep_as_the_api_server_allows_is_measured() -> None:
    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # as the operator runs; only to build the object
    try:
        job = {"spec": {"trainer": {"config": nested(9_990)}}}
    finally:
        sys.setrecursionlimit(old)
    path = too_deep_path(job, 100)
    assert path is not None and path.startswith("spec.trainer.config.a.a")
    assert path.count(".") + 1 == 100  # the 101st map is reached through 100 keys


def test_a_job_within_the_limit_passes() -> None:
    job = {"spec": {"roles": [{"template": {"spec": {"containers": [{"env": [{}]}]}}}]}}
    assert too_deep_path(job, 100) is None
    assert too_deep_path(nested(100), 100) is None  # 100 maps: the limit itself is fine
    assert too_deep_path(nested(101), 100) == "a" + ".a" * 99


def test_lists_count_as_levels_and_show_their_index() -> None:
    assert too_deep_path({"x": [[1]]}, 3) is None
    assert too_deep_path({"x": [[[1]]]}, 3) == "x[0][0]"


def test_status_fails_the_job_with_a_message_naming_the_field() -> None:
    message = too_deep_message("spec.x.a.a", 100)
    assert "spec.x.a.a" in message and "100" in message and "re-create" in message
    status = too_deep_status({"phase": "Pending"}, message, NOW, 3)
    assert status["phase"] == "Failed"
    (cond,) = status["conditions"]
    assert cond["type"] == CONDITION_FAILED and cond["status"] == "True"
    assert cond["reason"] == REASON_INVALID_SPEC and cond["observedGeneration"] == 3
    assert status["completionTime"] == "2026-01-01T00:00:00Z"


def test_a_very_long_path_is_cut_in_the_message() -> None:
    assert len(too_deep_message("a." * 5000, 100)) < 400
