"""The lifecycle planner driven the way the operator drives it: one pass's status feeds the
next (`after`), so the states the tests start from are ones the planner really produces.
Shared by test_lifecycle.py (the scenario table) and test_lifecycle_sequences.py."""

from __future__ import annotations

from typing import Any

from unit.operator.builders import JobBuilder, PodBuilder, a_job, a_pod, at, pods

from dtjob_operator.admission.seam import AdmissionVerdict
from dtjob_operator.lifecycle import Observed, Plan, plan
from dtjob_operator.settings import OperatorSettings

# Pinned: the tables name the active floor (5 s) apart from the resync (10 s); the default
# progress sync is 60 s.
SETTINGS = OperatorSettings(progress_sync_seconds=5.0)
SUPPORT = frozenset(
    {
        ("ServiceAccount", "j-trainer"),
        ("Role", "j-progress"),
        ("RoleBinding", "j-progress"),
        ("ConfigMap", "j-config"),
        ("ConfigMap", "j-progress"),
        ("ConfigMap", "j-history"),
        ("Service", "j"),
    }
)


def run(
    job: JobBuilder,
    *observed: PodBuilder,
    now: float = 0,
    children: frozenset[tuple[str, str]] = SUPPORT,
    progress: dict[str, Any] | None = None,
    admitted: bool = True,
) -> Plan:
    return plan(
        Observed(
            job=job.obj(),
            pods=pods(*observed),
            children=children,
            progress=progress,
            now=at(now),
            admission=AdmissionVerdict(admitted=admitted),
        ),
        SETTINGS,
    )


def after(job: JobBuilder, *observed: PodBuilder, now: float = 0) -> JobBuilder:
    """The job carrying the status one planner pass computes from `observed`."""
    return job.copy().with_full_status(run(job, *observed, now=now).status)


def condition(p: Plan, type_: str) -> dict[str, Any]:
    return next(c for c in p.status["conditions"] if c["type"] == type_)


def created(p: Plan) -> list[str]:
    return [f"{m['kind']}/{m['metadata']['name']}" for m in p.create]


# --- the jobs and pods the scenarios are made of ---------------------------------------------

DDP = a_job().with_workers(2, gpus=1)


def w(index: int, generation: int = 0, job: JobBuilder = DDP) -> PodBuilder:
    return a_pod(job, "worker", index, generation)


def ready(index: int, generation: int = 0) -> PodBuilder:
    return w(index, generation).running().ready()


STARTING = after(DDP, now=0)  # gang created at t=0
RUNNING = after(STARTING, ready(0), ready(1), now=5)
RESTARTING = after(RUNNING, ready(0), w(1).failed(exit_code=137, finished_at=20), now=20)

GANG_0 = ["Pod/j-worker-0", "Pod/j-worker-1"]
