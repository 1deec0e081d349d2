"""The per-job gauges on the operator's /metrics: set from status.progress while a job runs,
gone when it finishes or is deleted, and never more than the limit's worth of jobs."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from dtjob_operator.metrics import OperatorMetrics

PROGRESS = {"step": 40, "totalSteps": 100, "loss": 0.25, "samplesPerSecond": 512.0}


def exposed(metrics: OperatorMetrics) -> dict[str, float]:
    """The samples as Prometheus scrapes them: 'name{labels}' -> value."""
    samples = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith("dtjob_job"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


def series(metrics: OperatorMetrics, name: str) -> set[str]:
    return {k for k in exposed(metrics) if k.startswith(name + "{")}


def test_a_running_jobs_progress_becomes_its_gauges() -> None:
    metrics = OperatorMetrics()
    metrics.job_progress.observe(("team", "gpt"), "Running", PROGRESS)
    got = exposed(metrics)
    labels = '{job="gpt",namespace="team"}'
    assert got[f"dtjob_job_step{labels}"] == 40
    assert got[f"dtjob_job_total_steps{labels}"] == 100
    assert got[f"dtjob_job_loss{labels}"] == 0.25
    assert got[f"dtjob_job_samples_per_second{labels}"] == 512.0
    assert got["dtjob_job_metrics_left_out_jobs"] == 0


def test_a_field_the_trainer_no_longer_reports_has_no_stale_series() -> None:
    metrics = OperatorMetrics()
    metrics.job_progress.observe(("team", "gpt"), "Running", PROGRESS)
    metrics.job_progress.observe(("team", "gpt"), "Restarting", {"step": 30})
    assert series(metrics, "dtjob_job_loss") == set()
    assert exposed(metrics)['dtjob_job_step{job="gpt",namespace="team"}'] == 30


@pytest.mark.parametrize("end", ["Succeeded", "Failed", None])
def test_series_go_when_the_job_finishes_or_is_deleted(end: str | None) -> None:
    metrics = OperatorMetrics()
    metrics.job_progress.observe(("team", "gpt"), "Running", PROGRESS)
    metrics.job_progress.observe(("team", "other"), "Running", PROGRESS)
    metrics.job_progress.observe(("team", "gpt"), end, PROGRESS)
    for name in ("dtjob_job_step", "dtjob_job_loss", "dtjob_job_samples_per_second"):
        assert series(metrics, name) == {f'{name}{{job="other",namespace="team"}}'}


def test_at_most_the_limit_of_jobs_and_the_rest_counted() -> None:
    metrics = OperatorMetrics(job_limit=2)
    for job in ("a", "b", "c", "d"):
        metrics.job_progress.observe(("ns", job), "Running", PROGRESS)
    assert len(series(metrics, "dtjob_job_step")) == 2
    assert exposed(metrics)["dtjob_job_metrics_left_out_jobs"] == 2
    # A finished job frees its slot for one left out, at that job's next reconcile.
    metrics.job_progress.observe(("ns", "a"), "Succeeded", PROGRESS)
    metrics.job_progress.observe(("ns", "c"), "Running", PROGRESS)
    assert series(metrics, "dtjob_job_step") == {
        'dtjob_job_step{job="b",namespace="ns"}',
        'dtjob_job_step{job="c",namespace="ns"}',
    }
    assert exposed(metrics)["dtjob_job_metrics_left_out_jobs"] == 1
    metrics.job_progress.observe(("ns", "d"), None, None)  # deleted while left out
    assert exposed(metrics)["dtjob_job_metrics_left_out_jobs"] == 0


def test_a_limit_of_zero_exports_no_job() -> None:
    metrics = OperatorMetrics(job_limit=0)
    metrics.job_progress.observe(("ns", "a"), "Running", PROGRESS)
    assert series(metrics, "dtjob_job_step") == set()
    assert exposed(metrics)["dtjob_job_metrics_left_out_jobs"] == 1


def test_the_slowest_stragglers_slowdown_is_a_gauge_while_there_is_one() -> None:
    metrics = OperatorMetrics()
    metrics.job_progress.observe(("team", "gpt"), "Running", {**PROGRESS, "stragglerSlowdown": 2.5})
    assert exposed(metrics)['dtjob_job_straggler_slowdown{job="gpt",namespace="team"}'] == 2.5
    metrics.job_progress.observe(("team", "gpt"), "Running", PROGRESS)  # the episode ended
    assert series(metrics, "dtjob_job_straggler_slowdown") == set()
