"""The text `kubectl dtj` prints for get, top, why and queue, and the terminal loss plot,
compared exactly with golden files (tests/unit/client/golden/)."""

from __future__ import annotations

from datetime import UTC, datetime

from unit.client.builders import JobJson, event, pod, quota
from unit.client.golden import assert_golden

from dtjob_client.history import History, HistoryPoint
from dtjob_client.jobs import Job
from dtjob_client.queueing import queue_view
from dtjob_client.render.chart import format_chart
from dtjob_client.render.jobs import format_jobs, format_top
from dtjob_client.render.queue_text import format_queue
from dtjob_client.render.why_text import format_why
from dtjob_client.why import explain

NOW = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
ADMISSION = (
    "position 3 in the queue of namespace team-a: needs 8 nvidia.com/gpu, "
    "namespace team-a has 4 free of 16"
)


def fleet() -> list[Job]:
    """A running, a queued, a starting, a finished and a pipeline job."""
    return [
        JobJson("bert", created="2026-03-01T09:00:00Z").role("worker", 4, gpus=2)
        .status(phase="Running", strategy="DataParallel", ready="4/4", restarts=1,
                admission={"domain": "example.com/rack=r3"})
        .progress(step=1200, totalSteps=5000, loss=1.23456, samplesPerSecond=2345.6,
                  etaSeconds=3725).job(),
        JobJson("big", created="2026-03-01T10:25:00Z").role("worker", 2, gpus=4)
        .status(phase="Queued", strategy="DataParallel", ready="0/2", queuePosition=3,
                reason="WaitingForAdmission").job(),
        JobJson("pipe", created="2026-03-01T10:28:30Z").strategy("Pipeline")
        .role("stage", 3, gpus=1)
        .status(phase="Starting", strategy="Pipeline", ready="1/3", reason="Unschedulable")
        .job(),
        JobJson("done", created="2026-02-27T08:00:00Z").role("worker", 1, gpus=1)
        .role("ps", 2).strategy("ParameterServer")
        .status(phase="Succeeded", strategy="ParameterServer", ready="0/3")
        .progress(step=300, totalSteps=300, loss=0.0381, samplesPerSecond=12.25,
                  etaSeconds=0.0).job(),
        JobJson("mirror", "team-b", created="2026-03-01T10:29:15Z")
        .strategy("MirroredStrategy").role("worker", 2, gpus=8)
        .status(phase="Running", strategy="DataParallel", ready="2/2",
                elastic={"replicas": 2, "minReplicas": 1, "maxReplicas": 4, "resizes": 1,
                         "lastResizeReason": "grew from 1 to 2 workers into free capacity"})
        .progress(step=10, samplesPerSecond=85.25, etaSeconds=42.4).job(),
    ]  # fmt: skip


def test_get_table() -> None:
    jobs = [j for j in fleet() if j.namespace == "team-a"]
    assert_golden("get.txt", format_jobs(jobs, NOW))


def test_get_wide_all_namespaces() -> None:
    assert_golden("get-wide-all.txt", format_jobs(fleet(), NOW, wide=True, all_namespaces=True))


def test_top_puts_running_jobs_first_by_throughput() -> None:
    text = format_top(fleet(), NOW, all_namespaces=True)
    assert_golden("top.txt", text)
    names = [line.split()[1] for line in text.splitlines()[2:]]
    assert names[:2] == ["bert", "mirror"], names


def test_top_ends_with_the_slow_ranks_of_the_jobs_that_have_one() -> None:
    note = "ranks: rank 1 (pod bert-worker-0 on node gpu-1) straggles: 2.4x the CPU time per step"
    text = format_top(fleet(), NOW, all_namespaces=True, rank_notes={("nlp", "bert"): note})
    assert text == format_top(fleet(), NOW, all_namespaces=True) + f"nlp/bert {note}\n"


def queued_big() -> Job:
    return (
        JobJson("big").role("worker", 2, gpus=4)
        .status(phase="Queued", strategy="DataParallel", ready="0/2", queuePosition=3,
                reason="WaitingForAdmission", admission={"requeues": 1})
        .condition("Admitted", "False", "WaitingForAdmission", ADMISSION)
        .job()
    )  # fmt: skip


def test_why_queued_names_position_and_quota_numbers() -> None:
    events = [
        event("big", "WaitingForAdmission", ADMISSION),
        event("other-job", "Admitted", "not about this job"),
    ]
    quotas = [quota("gpu-quota", gpu=("16", "12"), pods=("100", "3"))]
    why = explain(queued_big(), [], events, quotas)
    text = format_why(why)
    assert_golden("why-queued.txt", text)
    assert "queued 3rd in namespace team-a: needs 8 nvidia.com/gpu" in text
    assert (
        "quota gpu-quota: count/pods 3 used of 100, requests.nvidia.com/gpu 12 used of 16" in text
    )
    assert "not about this job" not in text


def test_why_starting_shows_pod_reasons_and_scheduler_messages() -> None:
    job = (
        JobJson("pipe").strategy("Pipeline").role("stage", 3, gpus=1)
        .status(phase="Starting", strategy="Pipeline", ready="1/3", reason="Unschedulable",
                admission={"domain": "kubernetes.io/hostname=n2"})
        .condition("Admitted", "True", "Admitted", "the whole gang may start")
        .condition("Running", "False", "Unschedulable",
                   "pod pipe-stage-2 cannot be scheduled: 0/4 nodes are available")
        .job()
    )  # fmt: skip
    unschedulable = {"conditions": [{"type": "PodScheduled", "status": "False",
                     "reason": "Unschedulable",
                     "message": "0/4 nodes are available: 4 Insufficient gpu."}]}  # fmt: skip
    pulling = {"containerStatuses": [
        {"name": "sidecar", "state": {"running": {}}},
        {"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff",
                                                  "message": "Back-off pulling image"}}},
    ]}  # fmt: skip
    pods = [
        pod("pipe", "stage", 0, generation=1),
        pod("pipe", "stage", 1, phase="Pending", ready=False, generation=1, **pulling),
        pod("pipe", "stage", 2, phase="Pending", ready=False, generation=1, **unschedulable),
        # A leftover of the previous gang: not part of the explanation.
        pod("pipe", "stage", 2, phase="Failed", ready=False, generation=0),
    ]
    pods[3]["metadata"]["name"] = "old"
    events = [
        event("pipe-stage-2", "FailedScheduling", "0/4 nodes are available", "Warning",
              "2026-03-01T10:03:00Z", count=4),
        event("pipe", "Admitted", "the whole gang may start", time="2026-03-01T10:01:30Z"),
    ]  # fmt: skip
    text = format_why(explain(job, pods, events, []))
    assert_golden("why-starting.txt", text)
    assert "(old)" not in text
    assert "\nplaced in kubernetes.io/hostname=n2\n" in text


def test_why_failed_says_the_failure() -> None:
    job = (
        JobJson("bad").role("worker", 2)
        .status(phase="Failed", strategy="DataParallel", reason="PodFailedPermanent")
        .progress(step=40, totalSteps=300)
        .condition("Failed", "True", "PodFailedPermanent",
                   "pod bad-worker-1 exited with code 2: invalid job config")
        .job()
    )  # fmt: skip
    assert_golden("why-failed.txt", format_why(explain(job, [], [], [])))


def test_queue_in_admission_order_with_quota_use() -> None:
    jobs = [
        JobJson("c", created="2026-03-01T10:10:00Z").role("worker", 1, gpus=8)
        .status(phase="Queued", queuePosition=2, reason="WaitingForAdmission").job(),
        JobJson("a", created="2026-03-01T10:20:00Z").role("worker", 2, gpus=4)
        .status(phase="Queued", queuePosition=1, reason="WaitingForAdmission").job(),
        JobJson("new", created="2026-03-01T10:29:00Z").role("worker", 1, gpus=1)
        .status(phase="Queued").job(),
        JobJson("victim", created="2026-03-01T09:00:00Z").role("worker", 1, gpus=2)
        .status(phase="Suspended", queuePosition=3, reason="Preempted").job(),
        JobJson("running").role("worker", 1, gpus=2).status(phase="Running").job(),
        JobJson("x", "team-b").role("worker", 1, gpus=1)
        .status(phase="Queued", queuePosition=1, reason="Inadmissible").job(),
    ]  # fmt: skip
    quotas = [quota("gpu-quota", gpu=("16", "12")), quota("gpus", "team-b", gpu=("0", "0")),
              quota("unrelated", "team-c", gpu=("8", "8"))]  # fmt: skip
    view = queue_view(jobs, quotas)
    assert [j.name for j in view.jobs] == ["a", "c", "victim", "new", "x"]
    team_a = queue_view([j for j in jobs if j.namespace == "team-a"], quotas)
    assert_golden("queue.txt", format_queue(team_a, NOW, False, "team-a"))
    assert_golden("queue-all.txt", format_queue(view, NOW, True, "team-a"))
    assert format_queue(queue_view([], []), NOW, False, "ns") == (
        "no jobs waiting for admission in namespace ns\n"
    )


def test_terminal_plot() -> None:
    rows = [(20 * i, 2.3 * 0.8**i) for i in range(1, 16)]
    history = History(tuple(HistoryPoint(s, loss) for s, loss in rows), stride=2)
    text = format_chart(history, "cpu-data-parallel")
    assert_golden("plot.txt", text)
    assert text.count("*") == len(rows)


def test_terminal_plot_of_an_empty_or_flat_history() -> None:
    assert format_chart(History(), "old") == "old: no loss recorded yet\n"
    flat = History((HistoryPoint(1, 0.5), HistoryPoint(2, 0.5), HistoryPoint(3, None)))
    text = format_chart(flat, "flat", width=10, height=3)
    assert text.count("*") == 2
    assert_golden("plot-flat.txt", text)


def test_why_an_elastic_job_says_its_resizes() -> None:
    mirror = next(j for j in fleet() if j.name == "mirror")
    text = format_why(explain(mirror, [], [], []))
    assert "resized 1 time(s), last: grew from 1 to 2 workers into free capacity" in text


def test_why_says_what_a_running_elastic_job_waits_for_to_grow() -> None:
    """Below its maximum: the claim it needs, the resizes it has used up, or the cooldown
    and the empty queue the admission waits for; nothing at its maximum."""

    def job(replicas: int = 2, resizes: int = 1, **spec: object) -> Job:
        elastic = {"replicas": replicas, "minReplicas": 1, "maxReplicas": 4,
                   "resizes": resizes, "lastResizeTime": "2026-03-01T10:00:00Z"}  # fmt: skip
        j = JobJson("flex").role("worker", 4, gpus=8, minReplicas=1).spec(**spec)
        return j.status(phase="Running", startTime="2026-03-01T09:00:00Z", elastic=elastic).job()

    def said(j: Job) -> str:
        return format_why(explain(j, [], [], []))

    claim = {"checkpoint": {"claimName": "ckpt"}}
    assert (
        "runs at 2 of at most 4 workers; it does not grow without spec.checkpoint.claimName"
        in said(job())
    )
    grows = said(job(**claim, runPolicy={"elastic": {"cooldownSeconds": 300}}))
    assert (
        "runs at 2 of at most 4 workers; it grows once room for more has stayed free for 300s "
        "while nobody in namespace team-a waits, not before 2026-03-01T10:05:00Z"
    ) in grows
    spent = said(job(resizes=3, **claim, runPolicy={"elastic": {"maxResizes": 3}}))
    assert "it keeps that size: its 3 resizes reached runPolicy.elastic.maxResizes" in spent
    assert "runs at" not in said(job(replicas=4, **claim))
    kueue = JobJson("flex").role("worker", 4, gpus=8, minReplicas=1).spec(**claim)
    kueue = kueue.status(phase="Running", elastic={"replicas": 2, "minReplicas": 1,
                                                   "maxReplicas": 4, "resizes": 0})  # fmt: skip
    kueue = kueue.condition("Admitted", "True", "Admitted", "admitted by Kueue in ClusterQueue q")
    assert (
        "runs at 2 of at most 4 workers, as Kueue admitted it (partial admission); it keeps "
        "that size until Kueue evicts it and admits it again"
    ) in said(kueue.job())


def test_top_says_where_the_listed_jobs_gpu_time_went() -> None:
    spent = {"gpuSeconds": {"training": 3600, "restarting": 400}}
    jobs = [
        JobJson(n).role("worker", 1, gpus=1).status(phase="Succeeded", goodput=spent).job()
        for n in ("a", "b")
    ]
    lines = format_top(jobs, NOW).splitlines()
    assert lines[1] == "goodput 90% of 2.2 GPU-hours; lost: restarting 10%"
