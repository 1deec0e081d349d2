"""`kubectl dtj why`: the explanation as text a person reads top to bottom: where the job
is and the one reason that matters, then the numbers (queue, quotas), the pods, the
conditions and the latest events."""

from __future__ import annotations

from dtjob_client.why import ConditionInfo, Why, queue_summary

# Which condition explains each phase best.
_KEY_CONDITION = {
    "Queued": "Admitted",
    "Pending": "Admitted",
    "Starting": "Running",
    "Running": "Running",
    "Restarting": "Restarting",
    "Suspended": "Suspended",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
}


def format_why(why: Why) -> str:
    """The text; every number in it was published by the operator or Kubernetes."""
    reason = f" ({why.reason})" if why.reason else ""
    lines = [f"job {why.namespace}/{why.name}: {why.phase}{reason}"]
    if (queued := queue_summary(why)) is not None:
        lines.append(queued)
    else:
        key = _key_condition(why)
        if key is not None and key.message:
            lines.append(f"{key.reason}: {key.message}")
    if why.where:
        lines.append(why.where)
    if why.stall:
        lines.append(why.stall)
    if why.domain:
        lines.append(f"placed in {why.domain}")
    if why.resizes:
        lines.append(f"resized {why.resizes} time(s), last: {why.last_resize}")
    if why.growth:
        lines.append(why.growth)
    if why.ready or why.step is not None:
        facts = []
        if why.ready:
            facts.append(f"{why.ready} pods ready")
        if why.step is not None:
            total = why.total_steps if why.total_steps is not None else "?"
            facts.append(f"step {why.step}/{total}")
        lines.append(", ".join(facts))
    if why.progress:
        lines.append(why.progress)
    if why.ranks:
        lines.append(why.ranks)
    if why.avoided:
        lines.append(why.avoided)
    if why.goodput:
        lines.append(why.goodput)
    if why.requeues or why.preemptions:
        lines.append(
            f"re-queued {why.requeues} time(s) after a pods-ready timeout; "
            f"preempted {why.preemptions} time(s)"
        )
    lines += _quotas(why)
    if why.pods:
        lines.append("")
        lines.append("pods not running and ready:")
        lines += [f"  {p.member} ({p.pod}): {p.phase}, {p.reason}" +
                  (f": {p.message}" if p.message else "") for p in why.pods]  # fmt: skip
    if why.conditions:
        lines.append("")
        lines.append("conditions:")
        lines += [f"  {c.type}={c.status} {c.reason}" + (f": {c.message}" if c.message else "")
                  for c in why.conditions]  # fmt: skip
    if why.events:
        lines.append("")
        lines.append("events (latest last):")
        for e in why.events:
            count = f" (x{e.count})" if e.count > 1 else ""
            lines.append(f"  {e.time} {e.type} {e.reason} {e.object}{count}: {e.message}")
    return "\n".join(lines) + "\n"


def _key_condition(why: Why) -> ConditionInfo | None:
    wanted = _KEY_CONDITION.get(why.phase)
    return next((c for c in why.conditions if c.type == wanted), None)


def _quotas(why: Why) -> list[str]:
    if not why.quotas:
        waiting = why.queue_position is not None
        return [f"no ResourceQuota in namespace {why.namespace}"] if waiting else []
    by_quota: dict[str, list[str]] = {}
    for q in why.quotas:
        by_quota.setdefault(q.quota, []).append(f"{q.resource} {q.used} used of {q.hard}")
    return [f"quota {name}: {', '.join(uses)}" for name, uses in by_quota.items()]
