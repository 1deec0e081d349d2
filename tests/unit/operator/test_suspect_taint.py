"""The dtjob.io/suspect taint (policies/suspect_taint.py, settings.taint_suspect_nodes): a
node several jobs' restarts pointed at is tainted once, for an admin to inspect; the taint
is never taken off by the operator, and comes back after an admin removed it only with new
evidence."""

from __future__ import annotations

from typing import Any

from unit.operator.builders import at

from dtjob_operator import suspects
from dtjob_operator.policies.suspect_taint import (
    JOBS_ANNOTATION,
    TAINT_KEY,
    WHY_ANNOTATION,
    taint_patch,
)

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _node(*taints: dict[str, str], jobs: str | None = None) -> dict[str, Any]:
    notes = {JOBS_ANNOTATION: jobs} if jobs is not None else {}
    return {
        "metadata": {"name": "n1", "resourceVersion": "42", "annotations": notes},
        "spec": {"taints": list(taints)},
    }


def test_a_suspect_node_gets_the_taint_beside_its_own_with_the_evidence() -> None:
    patch = taint_patch(_node(GPU_TAINT), ["team/b", "team/a"], "restarts of 2 jobs", at(0))
    assert patch == {
        "metadata": {
            "resourceVersion": "42",  # a concurrent change of the taints fails it (409)
            "annotations": {JOBS_ANNOTATION: "team/a,team/b", WHY_ANNOTATION: "restarts of 2 jobs"},
        },
        "spec": {"taints": [GPU_TAINT, {
            "key": TAINT_KEY, "value": "", "effect": "NoSchedule",
            "timeAdded": "2026-01-01T12:00:00Z",
        }]},
    }  # fmt: skip


def test_a_tainted_node_or_one_an_admin_cleared_for_the_same_jobs_is_left_alone() -> None:
    tainted = {"key": TAINT_KEY, "value": "", "effect": "NoSchedule"}
    assert taint_patch(_node(tainted), ["team/a", "team/b"], "x", at(0)) is None
    cleared = _node(GPU_TAINT, jobs="team/a,team/b")  # the admin removed the taint only
    assert taint_patch(cleared, ["team/b", "team/a"], "x", at(0)) is None
    # A third job pointing at it is new evidence: tainted again.
    again = taint_patch(cleared, ["team/a", "team/b", "team/c"], "x", at(0))
    assert again is not None and again["spec"]["taints"][-1]["key"] == TAINT_KEY


def _job(name: str, node: str) -> dict[str, Any]:
    avoided = [{"node": node, "reason": "x", "until": "2099-01-01T00:00:00Z"}]
    return {"metadata": {"namespace": "team", "name": name}, "status": {"avoidedNodes": avoided}}


def test_the_watch_taints_each_new_suspect_once_when_asked_to() -> None:
    jobs = [_job("a", "n1"), _job("b", "n1")]
    tainted: list[tuple[str, tuple[str, ...]]] = []
    watch = suspects.SuspectNodes(
        2, lambda: jobs, list, lambda node, said: None, lambda n: None,
        lambda name, who, why: tainted.append((name, tuple(who))),
    )  # fmt: skip
    assert watch.current() == {"n1"} and watch.renew() == {"n1"}
    assert tainted == [("n1", ("team/a", "team/b"))]
    off = suspects.SuspectNodes(2, lambda: jobs, list, lambda node, said: None, lambda n: None)
    assert off.current() == {"n1"}  # no taint callable: the default, nothing tainted
