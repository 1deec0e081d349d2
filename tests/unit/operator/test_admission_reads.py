"""Where an admission pass reads the jobs: the first pass (a new leader's) and the first after
leading again or after a failed pass list them from the API server, every other pass reads
the cache."""

from __future__ import annotations

from typing import Any

from dtjob_operator.admission.controller import AdmissionBook, AdmissionController
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.settings import OperatorSettings


class Source:
    """Answers every read of a pass with nothing, counting the job lists."""

    def __init__(self) -> None:
        self.job_lists = 0

    def list_jobs(self, namespaces: list[str] | None = None) -> list[Any]:
        self.job_lists += 1
        return []

    def list_all_pods(self) -> list[Any]:
        return []

    def list_nodes(self) -> list[Any]:
        return []

    def list_resource_quotas(self) -> list[Any]:
        return []

    def list_priority_classes(self) -> list[Any]:
        return []


def test_jobs_come_from_the_api_server_on_a_first_pass_and_from_the_cache_after() -> None:
    api, cache = Source(), Source()
    controller = AdmissionController(
        api,  # type: ignore[arg-type]
        OperatorSettings(),
        OperatorMetrics(),
        AdmissionBook(),
        enqueue=lambda key: None,
        reads=cache,
    )
    controller.run_pass()
    assert (api.job_lists, cache.job_lists) == (1, 0)
    controller.run_pass()
    controller.run_pass()
    assert (api.job_lists, cache.job_lists) == (1, 2)
    controller.list_jobs_fresh()  # led again, or a pass failed
    controller.run_pass()
    controller.run_pass()
    assert (api.job_lists, cache.job_lists) == (2, 3)
