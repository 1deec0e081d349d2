"""The order a job's children are created in (children.ChildCreator): what each create
needs exists first, and a gang the API server refuses costs one pod's POST."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from unit.operator.builders import a_job

from dtjob_operator.builders.children import build_children
from dtjob_operator.builders.job import Job
from dtjob_operator.children import ChildCreator
from dtjob_operator.kill_points import KillPoints
from dtjob_operator.kubehttp import ApiException
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.plan_types import Plan
from dtjob_operator.settings import OperatorSettings


class RecordingApi:
    """Creates by kind, in rounds: a call waits until every call of its round has come in,
    so the round a child was created in says what it was created beside. `refuse`: kinds
    the API server refuses (403)."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.refuse = refuse
        self.rounds: list[list[str]] = []
        self._lock = threading.Lock()

    def create(self, obj: dict[str, Any]) -> str:
        with self._lock:
            self.rounds[-1].append(obj["kind"])
        if obj["kind"] in self.refuse:
            raise ApiException(status=403, reason="Forbidden", body="")
        return f"uid-{obj['metadata']['name']}"


def creating(api: RecordingApi) -> tuple[ChildCreator, Plan, dict[str, Any]]:
    obj = a_job().with_workers(4).obj()
    obj["metadata"]["uid"] = "job-uid"
    children = build_children(Job.from_object(obj), OperatorSettings())
    pool = ThreadPoolExecutor(8)
    creator = ChildCreator(api, OperatorMetrics(), pool, KillPoints(""))  # type: ignore[arg-type]
    return creator, Plan(status={}, create=children), obj


def rounds_of(api: RecordingApi, creator: ChildCreator, plan: Plan, job: dict[str, Any]) -> Any:
    """Each batch the creator hands the pool, as one round."""
    real_map = creator._pool.map

    def batch(fn: Any, items: Any) -> Any:
        api.rounds.append([])
        return real_map(fn, list(items))

    creator._pool.map = batch  # type: ignore[method-assign]
    return creator.create(plan, job)


def test_the_role_binding_after_its_role_then_a_probe_then_the_rest_of_the_gang() -> None:
    api = RecordingApi()
    creator, plan, job = creating(api)
    assert rounds_of(api, creator, plan, job) is None
    first, second, third, fourth = (sorted(kinds) for kinds in api.rounds)
    assert {"Role", "ServiceAccount", "ConfigMap", "Service"} <= set(first)
    assert "Pod" not in first and "RoleBinding" not in first
    assert second == ["RoleBinding"]  # checked against its Role's rules: after it
    assert third == ["Pod"]  # the probe
    assert fourth == ["Pod"] * 3
    ensured = {kind for kind, _ in creator.ensured("job-uid")}
    assert ensured >= {"RoleBinding", "Role", "ServiceAccount"}  # never created again


def test_a_refused_binding_stops_before_any_pod() -> None:
    api = RecordingApi(refuse=("RoleBinding",))
    creator, plan, job = creating(api)
    refused = rounds_of(api, creator, plan, job)
    assert refused is not None and refused.kind == "RoleBinding"
    assert len(api.rounds) == 2 and "Pod" not in api.rounds[0] + api.rounds[1]
    assert "RoleBinding" not in {kind for kind, _ in creator.ensured("job-uid")}


def test_a_refused_probe_stops_the_gang() -> None:
    api = RecordingApi(refuse=("Pod",))
    creator, plan, job = creating(api)
    refused = rounds_of(api, creator, plan, job)
    assert refused is not None and refused.kind == "Pod"
    assert api.rounds[-1] == ["Pod"]  # one doomed POST, not four
