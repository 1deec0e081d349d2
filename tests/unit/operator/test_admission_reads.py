"""Where an admission pass reads the jobs: the first pass (a new leader's) and the first after
leading again or after a failed pass list them from the API server, every other pass reads
the cache."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from unit.operator.builders import a_job

from dtjob_operator.admission.book import AdmissionBook
from dtjob_operator.admission.controller import AdmissionController
from dtjob_operator.admission.resources import pod_requests
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.settings import OperatorSettings


class Source:
    """Answers every read of a pass with nothing, counting the job lists."""

    def __init__(self) -> None:
        self.job_lists = 0
        self.jobs: list[Any] = []
        self.pods: list[Any] = []
        self.nodes: list[Any] = []
        self.quotas: list[Any] = []
        self.quota_lists = 0

    def list_jobs(self, namespaces: list[str] | None = None) -> list[Any]:
        self.job_lists += 1
        return list(self.jobs)

    def list_all_pods(self) -> list[Any]:
        return list(self.pods)

    def list_nodes(self) -> list[Any]:
        return list(self.nodes)

    def list_resource_quotas(self) -> list[Any]:
        self.quota_lists += 1
        return list(self.quotas)

    def list_priority_classes(self) -> list[Any]:
        return []


def controller_over(
    api: Source, cache: Source, settings: OperatorSettings | None = None
) -> AdmissionController:
    """A controller that lists jobs live from `api` and reads everything else from `cache`."""
    return AdmissionController(
        api,  # type: ignore[arg-type]
        settings or OperatorSettings(),
        OperatorMetrics(),
        AdmissionBook(),
        enqueue=lambda key: None,
        reads=cache,
    )


def test_jobs_come_from_the_api_server_on_a_first_pass_and_from_the_cache_after() -> None:
    api, cache = Source(), Source()
    controller = controller_over(api, cache)
    controller.run_pass()
    assert (api.job_lists, cache.job_lists) == (1, 0)
    controller.run_pass()
    controller.run_pass()
    assert (api.job_lists, cache.job_lists) == (1, 2)
    controller.list_jobs_fresh()  # led again, or a pass failed
    controller.run_pass()
    controller.run_pass()
    assert (api.job_lists, cache.job_lists) == (2, 3)


def test_timer_passes_run_only_while_a_job_waits() -> None:
    api, cache = Source(), Source()
    settings = OperatorSettings(resync_seconds=0.05, admission_min_interval_seconds=0)
    controller = controller_over(api, cache, settings)

    def passes() -> int:
        return api.job_lists + cache.job_lists

    def until(condition: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + 20  # generous: a loaded machine
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        return condition()

    controller.start()
    try:
        assert until(lambda: passes() == 1)
        time.sleep(0.5)  # ten timer periods
        assert passes() == 1  # nothing waits, so the timer's passes are skipped
        controller.request()
        assert until(lambda: passes() == 2)  # asked for: runs
        # A job that cannot fit (no nodes) waits: the timer's passes go on.
        cache.jobs = [a_job().with_workers(1, gpus=1).obj()]
        controller.request()
        assert until(lambda: passes() >= 6)
    finally:
        controller.stop()


def test_until_a_pass_judges_a_job_its_status_says_why_it_waits() -> None:
    """A release just written (the book forgot the job) or a new leader: no flip to
    "waiting for the next admission pass" and back, which recorded an Event each way."""
    job = a_job().with_workers(1, gpus=1).obj()
    job["metadata"]["uid"] = "u"
    job["status"] = {
        "phase": "Queued",
        "queuePosition": 3,
        "conditions": [{"type": "Admitted", "status": "False", "reason": "Inadmissible",
                        "message": "the restarted gang no longer fits"}],
    }  # fmt: skip
    view = AdmissionBook().view(job)
    assert (view.admitted, view.reason, view.message, view.position) == (
        False, "Inadmissible", "the restarted gang no longer fits", 3,
    )  # fmt: skip
    job["status"] = {"phase": "Queued"}  # never judged: waiting
    assert AdmissionBook().view(job).message == "waiting for the next admission pass"


def test_a_pods_requests_are_read_again_when_the_pod_changes() -> None:
    """A pass remembers each pod's requests per pod version (parsing 10,000 pods' quantities
    was most of a pass); a new version is read afresh."""

    def pod(rv: str, cpu: str) -> dict[str, Any]:
        return {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv},
            "spec": {"nodeName": "n", "containers": [{"resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"},
        }

    api, cache = Source(), Source()
    controller = controller_over(api, cache)
    for rv, cpu in (("1", "1"), ("1", "1"), ("2", "3"), ("2", "3")):
        api.pods = cache.pods = [pod(rv, cpu)]
        used = controller.gather().namespaces_used["ns"]
        assert used == pod_requests(pod(rv, cpu)["spec"])


def gpu_node(gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "n0"},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_quota_the_cache_has_not_seen_yet_stops_an_admission() -> None:
    """The quota's watch event lags the job's: the pass that would admit reads the quotas
    from the API server, and decides again on them when they differ."""
    node = gpu_node(8)
    quota = {
        "metadata": {"name": "gpus", "namespace": "ns", "uid": "q", "resourceVersion": "1"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "0"}},
        "status": {"used": {"requests.nvidia.com/gpu": "0"}},
    }
    job = a_job().with_workers(2, gpus=2).with_status(phase="Queued").obj()
    job["metadata"]["uid"] = "u"
    api, cache = Source(), Source()
    api.nodes = cache.nodes = [node]
    api.jobs = cache.jobs = [job]
    api.quotas = [quota]  # not in the cache yet
    decisions = controller_over(api, cache).run_pass()
    assert api.quota_lists == 1
    assert decisions.admitted == []
    assert "quota" in decisions.verdicts["u"].message
    # The cache has caught up: the API server is asked, and the pass stands.
    api2 = Source()
    api2.quotas = [quota]
    cache.quotas = [quota]
    assert controller_over(api2, cache).run_pass().admitted == []
    # Without a quota the job is admitted, the API server having been asked once.
    api3, cache3 = Source(), Source()
    api3.nodes = cache3.nodes = [node]
    api3.jobs = cache3.jobs = [job]
    assert controller_over(api3, cache3).run_pass().admitted == ["u"]
    assert api3.quota_lists == 1


def test_an_elastic_job_counts_at_its_admitted_size_before_its_status_says_it() -> None:
    """Between the pass that admits an elastic job below its maximum and the reconcile that
    writes status.elastic, later passes hold the size it was given: counted at its maximum
    (4 x 4 GPUs) it would take more than the namespace's quota of 10 GPUs and keep a 2-GPU
    job out for a pass."""
    quota = {
        "metadata": {"name": "gpus", "namespace": "ns", "uid": "q", "resourceVersion": "1"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "10"}},
        "status": {"used": {"requests.nvidia.com/gpu": "0"}},
    }
    elastic = a_job("e").with_workers(4, gpus=4, minReplicas=1).obj()
    elastic["metadata"]["uid"] = "e"
    api, cache = Source(), Source()
    api.nodes = cache.nodes = [gpu_node(16)]
    api.quotas = cache.quotas = [quota]
    api.jobs = cache.jobs = [elastic]
    controller = controller_over(api, cache)
    first = controller.run_pass()
    assert first.admitted == ["e"] and first.sizes["e"] == 2
    small = a_job("s").with_workers(1, gpus=2).obj()
    small["metadata"]["uid"] = "s"
    cache.jobs = [elastic, small]  # e's status still says nothing
    assert controller.run_pass().verdicts["s"].admit
