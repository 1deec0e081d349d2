"""`kubectl dtj get` and `top`: one row per job with its progress."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime

from dtjob_api.goodput import summary as goodput_summary
from dtjob_client.jobs import Job
from dtjob_client.render.units import NONE, age, eta, number, rate, table
from dtjob_client.stalls import spent

COLUMNS = ("NAME", "STRATEGY", "PHASE", "STEP/TOTAL", "LOSS", "SAMPLES/S", "ETA", "GPUS")
WIDE = ("READY", "QUEUE", "RESTARTS", "REASON", "DOMAIN", "SIZE", "AGE")
TERMINAL = ("Succeeded", "Failed")


def strategy(job: Job) -> str:
    """What runs (Auto and tf.distribute names resolved by the operator), else the spec's."""
    if job.status.strategy:
        return str(job.status.strategy)
    return str(job.spec.strategy.type) if job.spec is not None else NONE


def step_total(job: Job) -> str:
    """`120/300`; `-` before the trainer reported."""
    p = job.status.progress
    if p is None or p.step is None:
        return NONE
    return f"{p.step}/{p.totalSteps if p.totalSteps is not None else '?'}"


def size(job: Job) -> str:
    """An elastic job's workers now and its bounds, `2 (1-4)`; `-` for a fixed job."""
    e = job.status.elastic
    if e is None or not e.maxReplicas:
        return NONE
    now = str(e.replicas) if e.replicas else NONE
    return f"{now} ({e.minReplicas}-{e.maxReplicas})"


def row(job: Job, now: datetime, wide: bool = False, namespace: bool = False) -> list[str]:
    """One job's cells, in the order of COLUMNS (+ WIDE)."""
    st, p = job.status, job.status.progress
    finished = st.phase in TERMINAL
    cells = [
        job.name,
        strategy(job),
        str(st.phase),
        step_total(job),
        number(p.loss if p else None),
        NONE if finished else rate(p.samplesPerSecond if p else None),
        NONE if finished else eta(p.etaSeconds if p else None),
        str(job.gpus),
    ]
    if wide:
        queue = str(st.queuePosition) if st.queuePosition is not None else NONE
        cells += [
            st.ready or NONE,
            queue,
            str(st.restarts),
            st.reason or NONE,
            (st.admission.domain if st.admission else None) or NONE,
            size(job),
            age(job.created, now),
        ]
    return [job.namespace, *cells] if namespace else cells


def format_jobs(
    jobs: Sequence[Job], now: datetime, wide: bool = False, all_namespaces: bool = False
) -> str:
    """The `get` table (kubectl's layout)."""
    header = list(COLUMNS) + (list(WIDE) if wide else [])
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    return table(header, [row(j, now, wide, all_namespaces) for j in jobs])


_TOP_ORDER = {"Running": 0, "Restarting": 1, "Starting": 2, "Pending": 3, "Queued": 4}


def format_top(
    jobs: Sequence[Job],
    now: datetime,
    all_namespaces: bool = False,
    rank_notes: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """`top`: a summary line, then the jobs that use the cluster first (running, by
    throughput), then waiting ones, then finished ones; then, for the jobs in `rank_notes`
    ((namespace, name) -> stalls.ranks_note), their slow or stopped ranks."""
    phases = Counter(str(j.status.phase) for j in jobs)
    summary = ", ".join(f"{n} {phase}" for phase, n in sorted(phases.items()))
    busy = sum(j.gpus for j in jobs if j.status.phase in ("Running", "Restarting", "Starting"))
    head = f"{len(jobs)} jobs ({summary or 'none'}); {busy} GPUs in started gangs"
    used: dict[str, float] = {}
    for j in jobs:
        for bucket, seconds in spent(j, now).items():
            used[bucket] = used.get(bucket, 0.0) + seconds
    if said := goodput_summary(used):  # where these jobs' GPU time went
        head += f"\n{said}"

    def key(j: Job) -> tuple[int, float, str, str]:
        p = j.status.progress
        speed = (p.samplesPerSecond or 0.0) if p else 0.0
        return (_TOP_ORDER.get(str(j.status.phase), 5), -speed, j.namespace, j.name)

    text = head + "\n" + format_jobs(sorted(jobs, key=key), now, all_namespaces=all_namespaces)
    for (ns, name), note in sorted((rank_notes or {}).items()):
        text += f"{ns}/{name} {note}\n"
    return text
