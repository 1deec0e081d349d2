"""Which informers the operator's caches run (caches.py): what each watches and keeps, and
whom its changes wake. caches.py holds the reads made through them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dtjob_api import GROUP, PLURAL
from dtjob_operator.constants import KUEUE_GROUP, KUEUE_VERSION, LABEL_JOB_NAME
from dtjob_operator.informer import Informer, lister
from dtjob_operator.k8s import JOBS, SCHEDULING, Obj
from dtjob_operator.kueue.api import KueueApi
from dtjob_operator.rest import CORE, group_path
from dtjob_operator.settings import OperatorSettings
from dtjob_operator.trims import (
    is_history_config_map,
    trim_job_config_map,
    trim_job_pod,
    trim_namespace,
    trim_node,
    trim_owned,
    trim_pod_for_capacity,
    trim_to_metadata,
)

log = logging.getLogger(__name__)

JobKey = tuple[str, str]

UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"
FINISHED_PHASES = ("Succeeded", "Failed")
# The API server ends each watch after this; the informer resumes it from where it was.
WATCH_SECONDS = 300

# Every (API group, resource, verb) the informers call; the chart grants them
# (tests/unit/operator/test_chart.py), with k8s.API_CALLS and handlers.KOPF_CALLS.
CACHE_CALLS: frozenset[tuple[str, str, str]] = frozenset(
    (group, resource, verb)
    for group, resource in ((GROUP, PLURAL), ("", "pods"), ("", "configmaps"), ("", "nodes"),
                            ("", "resourcequotas"), ("scheduling.k8s.io", "priorityclasses"),
                            (KUEUE_GROUP, "workloads"), ("", "namespaces"))
    for verb in ("list", "watch")
)  # fmt: skip


class Wakes(Protocol):
    """What the informers' changes call (caches.Caches)."""

    on_job_child: Callable[[JobKey], None]
    on_capacity: Callable[[], None]

    def note_gone(self, kind: str, obj: Obj) -> None: ...


@dataclass
class Built:
    """The informers, not started; Kueue's Workloads are only described (workload_options)."""

    jobs: list[Informer]
    job_pods: list[Informer]
    job_config_maps: list[Informer]
    unfinished_pods: Informer
    nodes: Informer
    quotas: Informer
    priority_classes: Informer
    namespaces: Informer
    workload_options: dict[str, Any] = field(default_factory=dict)


def jobs_pods_hold_capacity(settings: OperatorSettings) -> bool:
    """Whether the job-pods cache is where the admission finds the jobs' own pods: when
    it watches every namespace. Watching some namespaces only, pods of jobs elsewhere
    (another installation's) hold room too, so the unfinished-pods cache keeps all."""
    return not settings.namespaces


def build_informers(http: Any, settings: OperatorSettings, wakes: Wakes) -> Built:
    """Every informer of the caches, with its trims and callbacks (none started)."""
    hold_capacity = jobs_pods_hold_capacity(settings)

    def owned_changed(_kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        job = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
        if job and meta.get("namespace"):
            wakes.on_job_child((meta["namespace"], job))

    def job_pod_changed(kind: str, obj: Obj) -> None:
        owned_changed(kind, obj)
        wakes.note_gone(kind, obj)
        # What the unfinished-pods cache says by a DELETED when it does not hold the
        # jobs' pods: a pod finished or went, and its room is free.
        if hold_capacity and (
            kind == "DELETED" or (obj.get("status") or {}).get("phase") in FINISHED_PHASES
        ):
            wakes.on_capacity()

    def config_map_changed(kind: str, obj: Obj) -> None:
        # A history write (every 30 s per running job) changes nothing the reconcile
        # reads; its creation or deletion does (the planner re-creates a lost one).
        if kind == "MODIFIED" and is_history_config_map(obj):
            return
        owned_changed(kind, obj)

    def job_changed(kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("namespace") and meta.get("name"):
            wakes.on_job_child((meta["namespace"], meta["name"]))
        # A new job is one to admit: a pass as soon as this cache holds it, which the
        # pass reads, admits it before its first reconcile has to say it waits (a
        # status write and an Event per job, in a burst, when passes waited for it).
        if kind == "ADDED":
            wakes.on_capacity()

    def capacity_changed(kind: str, _obj: Obj) -> None:
        if kind in ("ADDED", "DELETED"):  # capacity came or went
            wakes.on_capacity()

    common: dict[str, Any] = {
        "page_size": settings.api_list_page_size,
        "watch_seconds": WATCH_SECONDS,
        "connect_timeout": settings.api_connect_timeout_seconds,
        # The API server ends each watch after WATCH_SECONDS, and sends bookmarks more
        # rarely than that on a quiet selected watch: silence past the end is a
        # half-open connection.
        "silence_timeout": WATCH_SECONDS + 30,
    }
    owned: dict[str, Any] = {
        **common, "index_label": LABEL_JOB_NAME, "on_change": owned_changed,
        "label_selector": LABEL_JOB_NAME,
    }  # fmt: skip
    scopes: list[dict[str, Any]] = [{"namespace": ns} for ns in settings.namespaces] or [{}]
    pods_call = lister(http, CORE, "pods")
    cms_call = lister(http, CORE, "configmaps")
    jobs_call = lister(http, JOBS, PLURAL)
    # A pod that finishes or goes leaves this set (DELETED): room freed, a pass may admit.
    others: dict[str, Any] = {"label_selector": f"!{LABEL_JOB_NAME}"} if hold_capacity else {}
    return Built(
        # The one watch of the jobs: a change wakes the job's reconcile (handlers.py says
        # why kopf does not watch them too).
        jobs=[
            Informer("jobs", jobs_call, trim=trim_owned, on_change=job_changed, **common, **s)
            for s in scopes
        ],
        job_pods=[
            Informer(
                "job-pods",
                pods_call,
                trim=trim_job_pod,
                **{**owned, "on_change": job_pod_changed},
                **s,
            )
            for s in scopes
        ],
        job_config_maps=[
            Informer(
                "job-configmaps",
                cms_call,
                trim=trim_job_config_map,
                **{**owned, "on_change": config_map_changed},
                **s,
            )
            for s in scopes
        ],
        unfinished_pods=Informer(
            "unfinished-pods",
            pods_call,
            trim=trim_pod_for_capacity,
            field_selector=UNFINISHED,
            on_change=capacity_changed,
            **others,
            **common,
        ),
        nodes=Informer(
            "nodes",
            lister(http, CORE, "nodes"),
            trim=trim_node,
            on_change=capacity_changed,
            **common,
        ),
        quotas=Informer(
            "resourcequotas",
            lister(http, CORE, "resourcequotas"),
            on_change=lambda _k, _o: wakes.on_capacity(),
            **common,
        ),
        priority_classes=Informer(
            "priorityclasses", lister(http, SCHEDULING, "priorityclasses"), **common
        ),
        namespaces=Informer(
            "namespaces", lister(http, CORE, "namespaces"), trim=trim_namespace, **common
        ),
        # Kueue's Workloads are watched from the first reconcile of a Kueue job, not from
        # here: the start never waits on (or fails with) a probe of an API that may be
        # missing or, in an outage, unreachable.
        workload_options=(
            {**owned, "trim": trim_to_metadata} if settings.admission != "external" else {}
        ),
    )


def workload_informers(http: Any, namespaces: list[str], options: dict[str, Any]) -> list[Informer]:
    """Kueue's Workloads of our jobs (labelled with the job's name): Kueue's admission or
    eviction wakes the job at once instead of at its next resync. The reconcile still
    reads the Workload from the API server (kueue/backend.py): this is only the bell.
    None where Kueue's API is not served: an informer would retry a 404 forever."""
    if not KueueApi(http).serves_workloads(namespaces[0] if namespaces else None):
        return []
    call = lister(http, group_path(KUEUE_GROUP, KUEUE_VERSION), "workloads")
    scopes: list[dict[str, Any]] = [{"namespace": ns} for ns in namespaces] or [{}]
    log.info("Kueue's Workload API is served: watching the jobs' Workloads")
    return [Informer("kueue-workloads", call, **options, **s) for s in scopes]
