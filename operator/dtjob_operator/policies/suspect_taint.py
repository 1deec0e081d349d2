"""The `dtjob.io/suspect` taint on a node several jobs' restarts pointed at (issue 36;
settings.taint_suspect_nodes, the chart's taintSuspectNodes, off by default: it needs
node patch rights, and it keeps every workload off the node, not only dtjob's). Pure.

The taint is NoSchedule: nothing new lands on the node until an admin has looked and
removed it (`kubectl taint nodes NODE dtjob.io/suspect-`). Running pods stay. The operator
never removes it itself: the avoidance by jobs expires, the admin's decision does not.
The annotation `dtjob.io/suspect-jobs` keeps the evidence it was put there for (the jobs);
the taint comes back after an admin removed it only with new evidence (another job), not
because the operator restarted and found the same suspects again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dtjob_operator.policies.times import format_time

TAINT_KEY = "dtjob.io/suspect"
JOBS_ANNOTATION = "dtjob.io/suspect-jobs"
WHY_ANNOTATION = "dtjob.io/suspect-reason"
EVIDENCE_LIMIT = 2000  # characters of the jobs' list kept in the annotation


def evidence(jobs: Sequence[str]) -> str:
    return ",".join(sorted(jobs))[:EVIDENCE_LIMIT]


def taint_patch(
    node: Mapping[str, Any], jobs: Sequence[str], why: str, now: datetime
) -> dict[str, Any] | None:
    """The merge patch that taints `node` (with its resourceVersion: a concurrent change
    of its taints makes it fail, 409, rather than be overwritten), or None: it is tainted
    already, or an admin removed the taint after this very evidence."""
    meta = node.get("metadata") or {}
    taints = list((node.get("spec") or {}).get("taints") or [])
    if any(t.get("key") == TAINT_KEY for t in taints):
        return None
    said = evidence(jobs)
    if (meta.get("annotations") or {}).get(JOBS_ANNOTATION) == said:
        return None
    taint = {"key": TAINT_KEY, "value": "", "effect": "NoSchedule", "timeAdded": format_time(now)}
    return {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": {JOBS_ANNOTATION: said, WHY_ANNOTATION: why[:1024]},
        },
        "spec": {"taints": [*taints, taint]},
    }
