"""Failure policy: is a failed pod worth a gang restart, and which failure decides.

NCCL cannot lose a member, so one failed pod ends the whole gang; the question is only
whether the next gang can do better (retryable: restart from the last checkpoint) or not
(permanent: fail the job at once). When several pods fail, the earliest (container
finishedAt) decides: the others usually died of it (a peer lost its partner). Equal times
go to the permanent failure, since restarting cannot fix a bug or a bad config. A pod that
only lost a peer (exit 201, the env contract's code for it) never decides while another
failure exists: it is a consequence by definition, and it can end first (a pod under
torchrun ends only when all its children have, so the failing child's pod often ends
after its peers' pods noticed the loss).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from dtjob_api.spec import RestartPolicy, RunPolicy
from dtjob_operator.constants import (
    REASON_PEER_LOST,
    REASON_POD_FAILED_PERMANENT,
    REASON_POD_FAILED_RETRYABLE,
    REASON_PREEMPTED,
    REASON_RENDEZVOUS_TIMEOUT,
)
from dtjob_operator.policies.hardware import hardware_fault
from dtjob_operator.policies.launcher_exit import LAUNCHER, child_exit, error_file_message
from dtjob_operator.policies.pods import (
    Pod,
    generation_of,
    is_finished,
    is_terminating,
    name_of,
    phase_of,
    trainer_termination,
)
from dtjob_operator.policies.times import parse_time

# What the bundled trainer and the kernel mean by an exit code (docs/env-contract.md).
EXIT_MEANINGS = {
    1: "unexpected error",
    2: "invalid job config",
    137: "killed by SIGKILL (out of memory or forced stop)",
    143: "stopped by SIGTERM (preemption, suspend or node drain)",
    200: "rendezvous with rank 0 timed out",
    201: "lost a peer during training",
}
# Retryable failures whose cause is known get a reason of their own.
EXIT_PEER_LOST = 201
EXIT_CONFIG = 2
RETRYABLE_REASONS = {143: REASON_PREEMPTED, 200: REASON_RENDEZVOUS_TIMEOUT, 201: REASON_PEER_LOST}
LOST_POD_DETAIL = "deleted or gone while the gang ran (eviction, node drain or a manual delete)"
DETAIL_LIMIT = 300  # characters of the container's termination message kept in status


@dataclass(frozen=True)
class PodFailure:
    """What is known about one failed pod."""

    pod: str
    container: str | None
    exit_code: int | None
    """None when the pod failed without its container exiting (evicted, node lost)."""
    finished_at: datetime | None
    reason: str | None
    """Kubernetes' word for it: OOMKilled, Error, Evicted, ..."""
    detail: str | None
    """The container's termination message (its last log lines) or the pod's message."""
    container_exit_code: int | None = None
    """Set when a launcher's child decided `exit_code`: the container's own code."""
    child_rank: int | None = None
    """The failing child's global rank, when the launcher named it."""
    launcher_failure: str | None = None
    """What happened to the launcher itself, when no child failed first."""


@dataclass(frozen=True)
class FailureVerdict:
    """The failure that decides the gang's fate."""

    failure: PodFailure
    retryable: bool
    reason: str
    """Condition reason: PodFailedPermanent, or PodFailedRetryable / Preempted / ..."""
    message: str
    """Names the pod, container, exit code, its meaning and the policy's judgement."""


def observe_failure(pod: Pod) -> PodFailure | None:
    """The failure of `pod`, or None when it has not failed. A trainer that exited non-zero
    counts even before the kubelet has moved the pod to phase Failed."""
    termination = trainer_termination(pod)
    code = _exit_code(termination[1]) if termination else None
    if phase_of(pod) != "Failed" and not code:
        return None
    status: Mapping[str, Any] = pod.get("status") or {}
    if termination is None or code is None:
        # No container exit to speak of: the pod itself was failed (eviction, node loss).
        return PodFailure(
            pod=name_of(pod),
            container=None,
            exit_code=None,
            finished_at=_pod_failed_at(pod),
            reason=status.get("reason"),
            detail=status.get("message"),
        )
    container, state = termination
    failure = PodFailure(
        pod=name_of(pod),
        container=container,
        exit_code=code,
        finished_at=parse_time(state.get("finishedAt")),
        reason=state.get("reason"),
        detail=state.get("message"),
    )
    # torchrun exits 1 for any failed child: the child's code is the one to classify.
    child = child_exit(state.get("message")) if code else None
    if child is None:
        # An error file without a code (torchrun's own error): its message, not the JSON.
        error = error_file_message(state.get("message"))
        return replace(failure, detail=error) if error else failure
    return replace(
        failure,
        exit_code=child.exit_code,
        container_exit_code=code,
        child_rank=child.rank,
        launcher_failure=child.launcher_failure,
        detail=child.error or failure.detail,
    )


def is_invalid_config(failure: PodFailure, bundled_trainer: bool) -> bool:
    """The bundled trainer's own exit 2: the spec cannot work as written (a factory that
    raises, a data file that is not there), found only once the trainer ran it. The job
    ends InvalidSpec, with the trainer's message (its termination message). A custom
    command's 2 is its own business (argparse's usage error, say), and so is a child's 2
    under a launcher."""
    return (
        bundled_trainer and failure.exit_code == EXIT_CONFIG and failure.container_exit_code is None
    )


def is_retryable(failure: PodFailure, policy: RunPolicy) -> bool:
    """ExitCode: listed codes first, then 1-127 permanent and 128+ retryable, and any code
    with a hardware fault in the container's last words (hardware.py) retryable; a pod that
    failed without an exit code (evicted, node lost) is retryable. OnFailure: always
    retryable. Never: never."""
    restart = RestartPolicy(policy.restartPolicy)
    if restart == RestartPolicy.ON_FAILURE:
        return True
    if restart == RestartPolicy.NEVER:
        return False
    code = failure.exit_code
    if code is None:
        return True
    if code in (policy.permanentExitCodes or []):
        return False
    if code in (policy.retryableExitCodes or []):
        return True
    # A GPU or fabric fault in its last words: the node failed, not the program.
    return code >= 128 or hardware_fault(failure.detail) is not None


def judge_failures(pods: Iterable[Pod], policy: RunPolicy) -> FailureVerdict | None:
    """The verdict on the earliest failure among `pods` (the current gang), or None."""
    return judge([f for p in pods if (f := observe_failure(p))], policy)


def lost_pod(pod: str, since: datetime | None, why: str = LOST_POD_DETAIL) -> PodFailure:
    """A gang member that is gone (or going) without having exited: deleted by a user,
    evicted, or lost with its node. NCCL cannot go on without it, so it counts as a
    failure without an exit code (retryable under the ExitCode policy)."""
    return PodFailure(
        pod=pod, container=None, exit_code=None, finished_at=since, reason="Deleted", detail=why
    )


def gang_failures(
    pods: Iterable[Pod], generation: int, members: Iterable[str], started: bool
) -> list[PodFailure]:
    """Failures of gang `generation`, whose pods are named `members`.

    Before the gang has started, only its live pods count: a pod still terminating from a
    suspend is no failure. Once started, a member being deleted, or gone, is lost to the
    collective: a retryable failure, so that the gang restarts at once instead of waiting
    for the others to time out."""
    gang = [p for p in pods if generation_of(p) == generation]
    if not started:
        gang = [p for p in gang if not is_terminating(p)]
    failures = [f for p in gang if (f := observe_failure(p))]
    if not started:
        return failures
    seen = {f.pod for f in failures}
    for pod in gang:
        if is_terminating(pod) and not is_finished(pod) and name_of(pod) not in seen:
            since = parse_time(pod["metadata"].get("deletionTimestamp"))
            failures.append(lost_pod(name_of(pod), since))
    present = {name_of(p) for p in gang}
    failures.extend(lost_pod(name, None) for name in members if name not in present)
    return failures


def judge(failures: Iterable[PodFailure], policy: RunPolicy) -> FailureVerdict | None:
    """The verdict on the earliest of `failures`, or None when there are none."""
    judged = [(f, is_retryable(f, policy)) for f in failures]
    if not judged:
        return None
    failure, retryable = min(judged, key=lambda fr: decisive_order(*fr))
    return FailureVerdict(
        failure=failure,
        retryable=retryable,
        reason=_reason(failure, retryable),
        message=describe(failure, retryable, policy),
    )


def decisive_order(failure: PodFailure, retryable: bool) -> tuple[object, ...]:
    """Sort key of the failure that decides (the smallest): lost peers last; then earliest
    first, unknown times last; at equal times permanent first; then by name, so that the
    verdict does not depend on list order."""
    return (
        failure.exit_code == EXIT_PEER_LOST,
        failure.finished_at is None,
        failure.finished_at or datetime.min,
        retryable,
        failure.pod,
    )


def describe(failure: PodFailure, retryable: bool, policy: RunPolicy) -> str:
    """e.g. "pod j-worker-1 exited with code 1 in container trainer: unexpected error
    (permanent under restartPolicy ExitCode)"."""
    judgement = f"{'retryable' if retryable else 'permanent'} under restartPolicy " + str(
        RestartPolicy(policy.restartPolicy)
    )
    if failure.exit_code is None:
        why = failure.reason or "no exit code"
        text = f"pod {failure.pod} failed without an exit code ({why}) ({judgement})"
    elif failure.container_exit_code is not None:
        text = f"pod {failure.pod}: {_launcher_text(failure)}: {_meaning(failure)} ({judgement})"
    else:
        text = (
            f"pod {failure.pod} exited with code {failure.exit_code} in container "
            f"{failure.container}: {_meaning(failure)} ({judgement})"
        )
    if failure.detail:
        text += f": {_tail(failure.detail)}"
    return text


def _launcher_text(failure: PodFailure) -> str:
    """e.g. "child process (rank 3) exited with code 75 under torchrun (container exit 1)
    in container trainer"."""
    where = f"(container exit {failure.container_exit_code}) in container {failure.container}"
    code = failure.exit_code
    assert code is not None
    if failure.launcher_failure:
        return f"{LAUNCHER} {failure.launcher_failure}, counted as code {code} {where}"
    rank = f" (rank {failure.child_rank})" if failure.child_rank is not None else ""
    return f"child process{rank} exited with code {code} under {LAUNCHER} {where}"


def _reason(failure: PodFailure, retryable: bool) -> str:
    if not retryable:
        return REASON_POD_FAILED_PERMANENT
    if failure.exit_code is None:
        return REASON_POD_FAILED_RETRYABLE
    return RETRYABLE_REASONS.get(failure.exit_code, REASON_POD_FAILED_RETRYABLE)


def _meaning(failure: PodFailure) -> str:
    code = failure.exit_code
    assert code is not None
    if failure.reason == "OOMKilled":
        return "out of memory (OOMKilled)"
    if hardware_fault(failure.detail) is not None:
        return "a hardware fault (GPU or interconnect)"
    if code in EXIT_MEANINGS:
        return EXIT_MEANINGS[code]
    if code > 128:
        return f"killed by signal {code - 128}"
    return "error"


def _tail(detail: str) -> str:
    """The end of a termination message (the error is at the end of a traceback), on one
    line, short enough for a condition message."""
    lines = [line.strip() for line in detail.strip().splitlines() if line.strip()]
    text = " | ".join(lines[-3:])
    return text if len(text) <= DETAIL_LIMIT else "..." + text[-(DETAIL_LIMIT - 3) :]


def _exit_code(state: Mapping[str, Any]) -> int | None:
    code = state.get("exitCode")
    return code if isinstance(code, int) else None


def _pod_failed_at(pod: Pod) -> datetime | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    times = [parse_time(c.get("lastTransitionTime")) for c in conditions]
    known = [t for t in times if t is not None]
    return max(known) if known else None
