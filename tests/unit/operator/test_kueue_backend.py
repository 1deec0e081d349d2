"""The Kueue backend's answers that need no API server (the rest run against the real
Kueue in integration/kueue): a job with no LocalQueue under admission "kueue" waits and
says how to name one, without a Workload being made."""

from __future__ import annotations

from typing import Any

from unit.operator.builders import a_job

from dtjob_operator.kueue.backend import KueueBackend
from dtjob_operator.settings import OperatorSettings


class NoApi:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no API call expected, got {name}")


def test_a_job_without_a_queue_waits_and_says_how_to_name_one() -> None:
    backend = KueueBackend(NoApi(), OperatorSettings(admission="kueue"), lambda: [])  # type: ignore[arg-type]
    admission, placements = backend.view(a_job("train", "team-a").with_workers(2).obj(), [])
    assert admission["admitted"] is False and placements == {}
    assert admission["admission_reason"] == "NoLocalQueue"
    assert (
        "kubectl label dtj train kueue.x-k8s.io/queue-name=<queue>"
        in admission["admission_message"]
    )
