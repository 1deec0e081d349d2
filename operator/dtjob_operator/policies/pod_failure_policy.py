"""Pod failure policy: which gang failures are the job's fault (counted against
backoffLimit) and which are the infrastructure's (disruptions: restart, do not count).

In the spirit of batch/v1's podFailurePolicy. The failure that decides the gang's fate is
the earliest (failure_policy.judge's order); then:

1. spec.runPolicy.podFailurePolicy rules, first match wins: FailJob (permanent), Ignore
   (restart, not counted), Count (restart, counted), matching a container's exit code
   (In/NotIn) or a pod condition (e.g. DisruptionTarget=True).
2. Without a matching rule, a disruption restarts the gang without counting: the pod
   carries DisruptionTarget=True (Eviction API, scheduler preemption, node drain, the taint
   manager, pod GC), or the member was lost with its node (NotReady, Unknown or gone).
   This holds under every restartPolicy: the job did nothing wrong.
3. Otherwise restartPolicy and the exit-code lists decide (failure_policy.is_retryable),
   and a restart counts.

A gang is one collective: when a member is disrupted, its peers die of it (exit 201, lost
peer) often before the disrupted pod's own end is recorded. So a retryable verdict is not
counted when any failure of the gang is an uncounted one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from dtjob_api.spec import (
    ExitCodeOperator,
    PodFailureAction,
    PodFailurePolicyRule,
    RestartPolicy,
    RunPolicy,
)
from dtjob_operator.constants import REASON_DISRUPTED, REASON_POD_FAILED_PERMANENT
from dtjob_operator.policies.failure_policy import (
    FailureVerdict,
    PodFailure,
    decisive_order,
    describe,
    is_retryable,
    judge,
)
from dtjob_operator.policies.pods import Pod

DISRUPTION_TARGET = "DisruptionTarget"


@dataclass(frozen=True)
class GangVerdict:
    """What the gang's failures mean for the job."""

    verdict: FailureVerdict
    counted: bool
    """False: the restart is not charged against backoffLimit (a disruption or Ignore)."""


@dataclass(frozen=True)
class _Judged:
    retryable: bool
    counted: bool
    note: str | None
    """Why the policy judged so, when it is not the exit code alone."""
    disrupted: bool


def disruption_of(pod: Pod | None) -> str | None:
    """The reason of the pod's DisruptionTarget=True condition (EvictionByEvictionAPI,
    PreemptionByScheduler, DeletionByTaintManager, DeletionByPodGC, ...), else None."""
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == DISRUPTION_TARGET and c.get("status") == "True":
            return str(c.get("reason") or DISRUPTION_TARGET)
    return None


def matches(rule: PodFailurePolicyRule, failure: PodFailure, pod: Pod | None) -> bool:
    """Does `rule` match this failure of `pod`?"""
    if rule.onExitCodes is not None:
        on = rule.onExitCodes
        code = failure.exit_code
        if on.containerName is not None:
            code = _exit_code_of(pod, on.containerName)
        if code is None:
            return False
        return (code in on.values) == (on.operator == ExitCodeOperator.IN)
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == want.type and c.get("status") == want.status
        for want in rule.onPodConditions or []
        for c in conditions
    )


def judge_one(failure: PodFailure, pod: Pod | None, policy: RunPolicy, node_lost: bool) -> _Judged:
    """Rules first, then the disruption default, then restartPolicy (module docstring)."""
    disruption = disruption_of(pod) or ("node lost" if node_lost else None)
    rules = policy.podFailurePolicy.rules if policy.podFailurePolicy else []
    for i, rule in enumerate(rules):
        if matches(rule, failure, pod):
            action = PodFailureAction(rule.action)
            note = f"podFailurePolicy rule {i} ({action})"
            if action == PodFailureAction.FAIL_JOB:
                return _Judged(False, True, note, disruption is not None)
            return _Judged(True, action == PodFailureAction.COUNT, note, disruption is not None)
    if disruption is not None:
        return _Judged(True, False, f"a disruption ({disruption})", True)
    return _Judged(is_retryable(failure, policy), True, None, False)


def judge_gang(
    failures: Iterable[PodFailure],
    pods: Iterable[Pod],
    policy: RunPolicy,
    lost_with_node: Set[str] = frozenset(),
) -> GangVerdict | None:
    """The verdict on the gang's failures; `lost_with_node` names pods whose node is
    NotReady, Unknown or gone."""
    by_name: Mapping[str, Pod] = {str(p["metadata"]["name"]): p for p in pods}
    failures = list(failures)
    if not failures:
        return None
    judged = {
        f.pod: judge_one(f, by_name.get(f.pod), policy, f.pod in lost_with_node) for f in failures
    }
    # The failure that decides, in failure_policy.judge's order.
    failure = min(failures, key=lambda f: decisive_order(f, judged[f.pod].retryable))
    j = judged[failure.pod]
    if j.retryable and j.counted:
        # Its peers died of a disruption: the gang restart is the disruption's, not counted.
        j = next((x for x in judged.values() if x.retryable and not x.counted), j)
    message = describe(failure, j.retryable, policy)
    if j.note:
        message += f"; {j.note}"
    if j.retryable and not j.counted:
        message += ": not counted against backoffLimit"
    if not j.retryable:
        reason = REASON_POD_FAILED_PERMANENT
    elif j.disrupted and not j.counted:
        reason = REASON_DISRUPTED
    else:  # the exit code's own retryable reason: Preempted, RendezvousTimeout, PeerLost, ...
        reason = _retryable_reason(failure)
    verdict = FailureVerdict(failure=failure, retryable=j.retryable, reason=reason, message=message)
    return GangVerdict(verdict=verdict, counted=j.counted)


def _retryable_reason(failure: PodFailure) -> str:
    verdict = judge([failure], _EVERY_FAILURE_RETRYABLE)
    assert verdict is not None
    return verdict.reason


def _exit_code_of(pod: Pod | None, container: str) -> int | None:
    statuses: list[Mapping[str, Any]] = ((pod or {}).get("status") or {}).get(
        "containerStatuses"
    ) or []
    for cs in statuses:
        if cs.get("name") == container:
            code = ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
            return code if isinstance(code, int) else None
    return None


_EVERY_FAILURE_RETRYABLE = RunPolicy(restartPolicy=RestartPolicy.ON_FAILURE)
