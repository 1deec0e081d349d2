"""What the reconcile does with a job it cannot handle: too deep -> Failed (InvalidSpec)
without planning; an unforeseen error -> one Warning event and a retry with backoff; the
API server unreachable -> short retries. The API is our own wrapper's surface, in memory."""

from __future__ import annotations

from typing import Any

import urllib3

from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.reconcile import UNREACHABLE_BACKOFF_MAX, Reconciler
from dtjob_operator.settings import OperatorSettings

KEY = ("ns", "j")


def deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(levels):
        cur["a"] = {}
        cur = cur["a"]
    return root


class Api:
    def __init__(self, job: dict[str, Any], fail_with: BaseException | None = None) -> None:
        self.job = job
        self.fail_with = fail_with
        self.patches: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return self.job

    def list_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        if self.fail_with is not None:
            raise self.fail_with
        raise AssertionError("a too-deep job must not get this far")

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.patches.append(status)
        self.job["status"] = {**(self.job.get("status") or {}), **status}

    def emit_event(self, job: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))


def job(spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": "j", "namespace": "ns", "uid": "u", "generation": 1}
    return {"metadata": meta, "spec": spec}


def reconciler(api: Api) -> Reconciler:
    settings = OperatorSettings(admission="external")
    return Reconciler(api, settings, OperatorMetrics())  # type: ignore[arg-type]


def test_a_too_deep_job_is_failed_once_without_planning() -> None:
    api = Api(job({"roles": {"worker": {"template": {"affinity": deep(150)}}}}))
    r = reconciler(api)
    assert r.reconcile(KEY) is None
    (patch,) = api.patches
    assert patch["phase"] == "Failed"
    (cond,) = patch["conditions"]
    assert cond["reason"] == "InvalidSpec"
    assert cond["message"].startswith("spec.roles.worker.template.affinity.a.a")
    assert [e[:2] for e in api.events] == [("Warning", "InvalidSpec")]
    assert r.reconcile(KEY) is None  # already Failed: nothing more written
    assert len(api.patches) == 1 and len(api.events) == 1


def test_an_unforeseen_error_records_one_event_and_retries_with_backoff() -> None:
    api = Api(job({}), fail_with=RuntimeError("boom"))
    r = reconciler(api)
    r._reconcile_and_requeue(KEY)
    r._reconcile_and_requeue(KEY)
    assert [(t, reason) for t, reason, _ in api.events] == [("Warning", "ReconcileError")]
    assert "RuntimeError: boom" in api.events[0][2]
    assert r._failures[KEY] == 2 and len(r.queue) == 1


def test_an_unreachable_api_server_is_retried_within_seconds() -> None:
    api = Api(job({}), fail_with=urllib3.exceptions.MaxRetryError(None, "/", "refused"))  # type: ignore[arg-type]
    r = reconciler(api)
    for _ in range(20):  # a long outage: the exponential backoff would be hours by now
        assert r._after_error(KEY, urllib3.exceptions.NewConnectionError(None, "x")) <= (  # type: ignore[arg-type]
            UNREACHABLE_BACKOFF_MAX
        )
    assert api.events == []  # an outage is not the job's fault
