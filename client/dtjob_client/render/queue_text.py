"""`kubectl dtj queue`: waiting jobs in admission order, and the quotas they wait on."""

from __future__ import annotations

from datetime import datetime

from dtjob_client.queueing import QueueView
from dtjob_client.render.units import NONE, age, table


def format_queue(view: QueueView, now: datetime, all_namespaces: bool, namespace: str) -> str:
    """The queue table, then every quota of the namespaces shown (USED is Kubernetes' own
    status.used; admission also counts gangs admitted but not created yet)."""
    if not view.jobs:
        where = "any namespace" if all_namespaces else f"namespace {namespace}"
        return f"no jobs waiting for admission in {where}\n"
    header = ["POSITION", "NAME", "GPUS", "PHASE", "REASON", "AGE"]
    rows = []
    for j in view.jobs:
        pos = str(j.status.queuePosition) if j.status.queuePosition is not None else NONE
        cells = [pos, j.name, str(j.gpus), str(j.status.phase), j.status.reason or NONE,
                 age(j.created, now)]  # fmt: skip
        rows.append([j.namespace, *cells] if all_namespaces else cells)
    text = table(["NAMESPACE", *header] if all_namespaces else header, rows)
    quota_rows = [
        [f"{ns}/{q.quota}" if all_namespaces else q.quota, q.resource, q.used, q.hard]
        for ns, uses in view.quotas.items()
        for q in uses
    ]
    if quota_rows:
        text += "\n" + table(["QUOTA", "RESOURCE", "USED", "HARD"], quota_rows)
    return text
