"""The run policy of a DistributedTrainingJob (spec.runPolicy): restarts, the pod failure
policy, deadlines and clean-up; policies/ applies it. spec.py re-exports every name. Field
docstrings become `kubectl explain` text."""

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from dtjob_api.base import ApiModel

# Lists carry bounds so that the API server can estimate the cost of the CEL rules
# (immutability compares whole sub-objects) and a manifest cannot grow without limit.
ExitCode = Annotated[int, Field(ge=1, le=255)]


class RestartPolicy(StrEnum):
    """What a failed pod means for the gang."""

    EXIT_CODE = "ExitCode"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"


class CleanPodPolicy(StrEnum):
    """Which pods are deleted when the job finishes."""

    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class StallPolicy(StrEnum):
    """What the operator does with a Running gang whose step stops moving."""

    RESTART = "Restart"
    OFF = "Off"


# A week: longer than any sane step, checkpoint or evaluation; anything longer is "Off".
MAX_PROGRESS_DEADLINE_SECONDS = 7 * 24 * 3600

ONE_MATCHER = "a podFailurePolicy rule sets exactly one of onExitCodes and onPodConditions"


class PodFailureAction(StrEnum):
    """What a failure matched by a podFailurePolicy rule does to the job."""

    FAIL_JOB = "FailJob"
    IGNORE = "Ignore"
    COUNT = "Count"


class ExitCodeOperator(StrEnum):
    """How onExitCodes compares a container's exit code with its values."""

    IN = "In"
    NOT_IN = "NotIn"


class PodFailurePolicyOnExitCodes(ApiModel):
    """Matches a pod whose container exited with (or without) one of `values`."""

    containerName: str | None = Field(default=None, max_length=63)
    """Only this container's exit code; by default the trainer's (else the first that ended)."""
    operator: ExitCodeOperator
    """In: the exit code is one of `values`; NotIn: it is none of them."""
    values: list[ExitCode] = Field(min_length=1, max_length=255)
    """Exit codes (1-255)."""


class PodFailurePolicyOnPodCondition(ApiModel):
    """Matches a failed pod that carries a condition, e.g. DisruptionTarget=True."""

    type: str = Field(min_length=1, max_length=316)
    """Pod condition type: DisruptionTarget (evicted, preempted, drained, taint manager,
    pod GC), ConfigIssue, or any other."""
    status: str = Field(default="True", pattern=r"^(True|False|Unknown)$")
    """The condition's status to match."""


class PodFailurePolicyRule(ApiModel):
    """One rule: an action for the failures it matches (exactly one of onExitCodes and
    onPodConditions)."""

    model_config = ConfigDict(
        **ApiModel.model_config,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.onExitCodes) != has(self.onPodConditions)",
                    "message": ONE_MATCHER,
                }
            ]
        },
    )

    action: PodFailureAction
    """FailJob: fail the job at once; Ignore: restart the gang without counting it against
    backoffLimit; Count: restart the gang and count it against backoffLimit."""
    onExitCodes: PodFailurePolicyOnExitCodes | None = None
    """Match on the container's exit code."""
    onPodConditions: list[PodFailurePolicyOnPodCondition] | None = Field(
        default=None, min_length=1, max_length=20
    )
    """Match when the pod has any of these conditions."""

    @model_validator(mode="after")
    def _one_matcher(self) -> "PodFailurePolicyRule":
        if (self.onExitCodes is None) == (self.onPodConditions is None):
            raise ValueError(ONE_MATCHER)
        return self


class PodFailurePolicy(ApiModel):
    """batch/v1 Job's podFailurePolicy for gangs: the first rule that matches a failed pod
    decides; without a match, restartPolicy and the exit-code lists decide."""

    rules: list[PodFailurePolicyRule] = Field(max_length=20)
    """Rules in order; the first match wins."""


class ElasticPolicy(ApiModel):
    """How often an elastic job (roles.worker.minReplicas) may be resized."""

    cooldownSeconds: int = Field(default=600, ge=0, le=86400)
    """Least time between two resizes, and how long room for more workers must stay free
    before the job grows into it."""
    maxResizes: int = Field(default=10, ge=0, le=1000)
    """Resizes allowed over the job's life (growth and shrinking); then its size stays."""


class RunPolicy(ApiModel):
    """Restarts, deadlines and clean-up."""

    backoffLimit: int = Field(default=3, ge=0, le=1000)
    """Gang restarts allowed after retryable failures before the job fails."""
    restartPolicy: RestartPolicy = RestartPolicy.EXIT_CODE
    """ExitCode: exit codes 1-127 are permanent, 128+ (signals, OOM kill) and any exit whose
    last log lines name a GPU or fabric fault retryable, unless listed below; OnFailure:
    every failure is retryable; Never: every failure is permanent."""
    retryableExitCodes: list[ExitCode] | None = Field(default=None, max_length=255)
    """ExitCode policy: codes that are retryable although the default would say permanent."""
    permanentExitCodes: list[ExitCode] | None = Field(default=None, max_length=255)
    """ExitCode policy: codes that are permanent although the default would say retryable."""
    podFailurePolicy: PodFailurePolicy | None = None
    """Rules applied before restartPolicy (docs/lifecycle.md). Without them, disruptions
    (a pod with DisruptionTarget=True: eviction, preemption, drain; a member lost with its
    node) restart the gang without counting against backoffLimit."""
    backoffSeconds: int = Field(default=10, ge=0, le=3600)
    """Delay before the first gang restart; doubled for each further restart."""
    maxBackoffSeconds: int = Field(default=300, ge=0, le=86400)
    """Upper bound of the restart delay."""
    activeDeadlineSeconds: int | None = Field(default=None, ge=1)
    """Seconds from start after which the job fails with reason DeadlineExceeded."""
    ttlSecondsAfterFinished: int | None = Field(default=None, ge=0)
    """Seconds after Succeeded or Failed after which the job (and its pods) are deleted."""
    progressDeadlineSeconds: int | None = Field(
        default=None, ge=10, le=MAX_PROGRESS_DEADLINE_SECONDS
    )
    """Seconds the step may stand still while Running before the gang restarts as Stalled.
    Unset: 10 step times, at least 600s, once learned; pauses to checkpoint or evaluate do
    not count."""
    stallPolicy: StallPolicy | None = None
    """Restart (default): restart a stalled gang from its checkpoint; Off: no check."""
    admissionRetryLimit: int = Field(default=3, ge=0, le=1000)
    """Built-in admission: times a gang whose pods are not all ready within the operator's
    pods-ready timeout is released and re-queued; one more timeout fails the job with the
    reason its pods were not ready (e.g. ImagePullBackOff)."""
    elastic: ElasticPolicy | None = None
    """Resize limits of an elastic job (roles.worker.minReplicas)."""
    cleanPodPolicy: CleanPodPolicy = CleanPodPolicy.RUNNING
    """When the job finishes: delete All pods, only Running ones (failed pods stay for their
    logs until the TTL), or None."""
