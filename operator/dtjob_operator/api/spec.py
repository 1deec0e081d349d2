"""The spec of a DistributedTrainingJob. Field docstrings become `kubectl explain` text."""

from enum import StrEnum
from typing import Annotated, Any, cast

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dtjob_operator.api.base import ApiModel
from dtjob_operator.api.resource_names import (
    DEFAULT_GPU_RESOURCE,
    EXTENDED_NAME_MESSAGE,
    EXTENDED_NAME_RULE,
    EXTENDED_RESOURCE_PATTERN,
    GPU_IN_EXTENDED_MESSAGE,
    MAX_EXTENDED_RESOURCES,
    RESOURCE_NAME_MAX,
    ROLE_RESOURCE_RULES,
    is_extended_resource,
    is_extra_resource_name,
)
from dtjob_operator.api.template_spec import PodTemplate
from dtjob_operator.constants import CONFIG_MOUNT_DIR, SHM_MOUNT_PATH

# Kubernetes resource quantity (e.g. "500m", "4", "16Gi"), the core API's own grammar
# without a sign: checked by the API server too.
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _int_to_quantity(value: Any) -> Any:
    # `cpu: 4` in YAML is an integer; the core API accepts it (int-or-string), so do we.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


Quantity = Annotated[
    str,
    Field(
        pattern=QUANTITY_PATTERN,
        max_length=64,
        json_schema_extra={"x-kubernetes-int-or-string": True},
    ),
    # Last, so it wraps the constrained str (and the pattern stays in the JSON schema).
    BeforeValidator(_int_to_quantity),
]
# A DNS-1123 subdomain (PersistentVolumeClaim names), as the core API checks it.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Lists and maps carry bounds so that the API server can estimate the cost of the CEL rules
# (immutability compares whole sub-objects) and a manifest cannot grow without limit.
Arg = Annotated[str, Field(max_length=4096)]
ExitCode = Annotated[int, Field(ge=1, le=255)]


class StrategyType(StrEnum):
    """How the model and the data are spread over the processes of the job."""

    DATA_PARALLEL = "DataParallel"
    PARAMETER_SERVER = "ParameterServer"
    MODEL_PARALLEL = "ModelParallel"
    PIPELINE = "Pipeline"
    HYBRID = "Hybrid"
    FSDP = "FSDP"
    CPU_OFFLOAD = "CPUOffload"
    AUTO = "Auto"


class PSMode(StrEnum):
    """Parameter-server update rule."""

    SYNC = "Sync"
    ASYNC = "Async"
    HOGWILD = "Hogwild"
    EASGD = "EASGD"


class PipelineSchedule(StrEnum):
    """Micro-batch schedule of torch.distributed.pipelining."""

    GPIPE = "GPipe"
    ONE_F_ONE_B = "1F1B"
    INTERLEAVED_1F1B = "Interleaved1F1B"


class BackendType(StrEnum):
    """Collective-communication backend."""

    AUTO = "auto"
    NCCL = "nccl"
    GLOO = "gloo"


class RoleName(StrEnum):
    """The roles a job's pods play."""

    WORKER = "worker"
    PS = "ps"
    STAGE = "stage"


class ModelType(StrEnum):
    """Model built by the bundled trainer."""

    MLP = "MLP"
    CNN = "CNN"
    GPT = "GPT"


class DatasetType(StrEnum):
    """Data set of the bundled trainer; all are bundled or generated, nothing is downloaded."""

    DIGITS = "Digits"
    SYNTHETIC_TOKENS = "SyntheticTokens"


class OptimizerType(StrEnum):
    """Optimizer of the bundled trainer."""

    SGD = "SGD"
    ADAM = "Adam"
    ADAMW = "AdamW"


class Precision(StrEnum):
    """Numeric precision of parameters and compute."""

    FP32 = "fp32"
    FP64 = "fp64"
    BF16 = "bf16"


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


class ParameterServerSpec(ApiModel):
    """Settings of the ParameterServer strategy."""

    mode: PSMode = PSMode.SYNC
    """Update rule: Sync (all workers' gradients averaged every step), Async (Downpour:
    workers push gradients and pull parameters without a barrier), Hogwild (lock-free
    updates to shared parameters by several processes in one pod), EASGD (elastic averaging)."""
    rho: float = Field(default=0.1, ge=0.0, le=10.0)
    """EASGD elasticity: how strongly workers are pulled towards the centre parameters."""
    tau: int = Field(default=4, ge=1, le=100000)
    """EASGD communication period: workers exchange with the centre every tau steps."""
    hogwildProcesses: int = Field(default=2, ge=1, le=64)
    """Hogwild: processes per worker pod that update the shared parameters lock-free."""


class PipelineSpec(ApiModel):
    """Settings of the Pipeline and Hybrid strategies."""

    schedule: PipelineSchedule = PipelineSchedule.GPIPE
    """Micro-batch schedule: GPipe, 1F1B (needs microbatches >= stages) or Interleaved1F1B."""
    microbatches: int = Field(default=4, ge=1, le=4096)
    """Micro-batches each global batch is split into; the batch size must divide evenly."""
    stagesPerRank: int = Field(default=2, ge=1, le=16)
    """Interleaved1F1B only: model chunks (virtual stages) each pipeline rank holds."""


class HybridSpec(ApiModel):
    """Settings of the Hybrid (pipeline x data parallel) strategy."""

    dataParallel: int = Field(default=2, ge=1, le=1024)
    """Data-parallel degree; the pipeline degree is the stage processes divided by it."""


class StrategySpec(ApiModel):
    """The parallelism strategy and its settings."""

    type: StrategyType
    """DataParallel, ParameterServer, ModelParallel, Pipeline, Hybrid, FSDP, CPUOffload or
    Auto (chosen from model size vs GPU memory; the choice and its reason go to status)."""
    backend: BackendType = BackendType.AUTO
    """Collective backend; auto means nccl when the pods have GPUs, gloo otherwise."""
    parameterServer: ParameterServerSpec | None = None
    """ParameterServer settings (only with type ParameterServer)."""
    pipeline: PipelineSpec | None = None
    """Pipeline settings (only with type Pipeline or Hybrid)."""
    hybrid: HybridSpec | None = None
    """Hybrid settings (only with type Hybrid)."""


class RoleSpec(ApiModel):
    """One role of the job: how many pods and what each one gets."""

    replicas: int = Field(default=1, ge=1, le=4096)
    """Number of pods in this role."""
    gpus: int = Field(default=0, ge=0, le=64)
    """Whole GPUs (of gpuResource) per pod (requests = limits)."""
    gpuResource: str = Field(
        default=DEFAULT_GPU_RESOURCE,
        max_length=RESOURCE_NAME_MAX,
        pattern=EXTENDED_RESOURCE_PATTERN,
    )
    """Extended resource the gpus are requested as: nvidia.com/gpu, a MIG profile such as
    nvidia.com/mig-1g.10gb, amd.com/gpu. GPU defaults (/dev/shm size, backend auto = nccl)
    follow gpus whatever the name."""
    extendedResources: dict[str, Quantity] | None = Field(
        default=None,
        max_length=MAX_EXTENDED_RESOURCES,
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": EXTENDED_NAME_RULE, "message": EXTENDED_NAME_MESSAGE}
            ]
        },
    )
    """Other resources per pod (requests = limits), e.g. {"rdma/hca_shared_devices_a": 1,
    "vpc.amazonaws.com/efa": 4, "hugepages-2Mi": "1Gi"}. Gang admission counts them against
    ResourceQuota (requests.<name>) and node allocatable."""
    procsPerPod: int | None = Field(default=None, ge=1, le=64)
    """Training processes per pod; defaults to gpus, or 1 for CPU-only pods."""
    cpu: Quantity | None = None
    """CPU per pod (requests = limits), e.g. "4"."""
    memory: Quantity | None = None
    """Memory per pod (requests = limits), e.g. "16Gi"."""
    template: PodTemplate | None = None
    """Pod template (metadata + a core/v1 PodSpec) the operator merges its contract into."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": ROLE_RESOURCE_RULES})

    @field_validator("gpuResource")
    @classmethod
    def _gpu_resource_is_extended(cls, name: str) -> str:
        if not is_extended_resource(name):
            raise ValueError(
                f"must be an extended resource name <domain>/<name> outside kubernetes.io, "
                f"e.g. nvidia.com/gpu or amd.com/gpu (got {name!r})"
            )
        return name

    @field_validator("extendedResources")
    @classmethod
    def _extended_names(
        cls, amounts: dict[str, str] | None, info: ValidationInfo
    ) -> dict[str, str] | None:
        bad = [k for k in amounts or {} if not is_extra_resource_name(k)]
        if bad:
            raise ValueError(f"{EXTENDED_NAME_MESSAGE} (got {', '.join(map(repr, bad))})")
        # gpuResource is declared first, so it is already validated (absent when invalid).
        gpu = info.data.get("gpuResource")
        if amounts and gpu in amounts:
            raise ValueError(f"{GPU_IN_EXTENDED_MESSAGE} (got {gpu!r})")
        return amounts

    def processes(self) -> int:
        """Processes per pod after defaulting."""
        if self.procsPerPod is not None:
            return self.procsPerPod
        return self.gpus if self.gpus > 0 else 1


class RolesSpec(ApiModel):
    """The job's roles; which are required or forbidden depends on the strategy."""

    worker: RoleSpec | None = None
    """Workers: every strategy except ModelParallel, Pipeline and Hybrid."""
    ps: RoleSpec | None = None
    """Parameter servers: ParameterServer strategy only."""
    stage: RoleSpec | None = None
    """Pipeline stages: ModelParallel, Pipeline and Hybrid only."""


class ModelSpec(ApiModel):
    """Model of the bundled trainer."""

    type: ModelType = ModelType.MLP
    """MLP (digits), CNN (digits as 8x8 images) or GPT (decoder on synthetic tokens)."""
    hiddenSizes: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        default_factory=lambda: [64, 64, 64], min_length=1, max_length=64
    )
    """MLP hidden layer widths; stages split the layers, so give at least as many as stages."""
    layers: int = Field(default=2, ge=1, le=256)
    """GPT: transformer blocks."""
    dModel: int = Field(default=64, ge=8, le=16384)
    """GPT: embedding width (a multiple of heads)."""
    heads: int = Field(default=4, ge=1, le=256)
    """GPT: attention heads."""
    seqLen: int = Field(default=32, ge=2, le=65536)
    """GPT: tokens per sample."""
    vocabSize: int = Field(default=256, ge=2, le=1048576)
    """GPT: vocabulary size of the synthetic tokens."""


class DatasetSpec(ApiModel):
    """Data of the bundled trainer."""

    type: DatasetType = DatasetType.DIGITS
    """Digits (scikit-learn's bundled 8x8 digits) or SyntheticTokens (generated)."""
    testFraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Share of Digits held out for the final accuracy."""
    samples: int = Field(default=8192, ge=1)
    """SyntheticTokens: number of generated sequences."""


class OptimizerSpec(ApiModel):
    """Optimizer of the bundled trainer."""

    type: OptimizerType = OptimizerType.SGD
    """SGD, Adam or AdamW."""
    lr: float = Field(default=0.05, gt=0.0, le=100.0)
    """Learning rate."""
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0)
    """SGD momentum."""
    weightDecay: float = Field(default=0.0, ge=0.0, le=1.0)
    """Weight decay."""


class TrainerSpec(ApiModel):
    """What the pods run: the bundled trainer's job, or a custom image + command that reads
    the same environment contract."""

    image: str | None = Field(default=None, max_length=1024)
    """Container image; defaults to the operator's configured trainer image."""
    imagePullPolicy: str | None = Field(default=None, pattern=r"^(Always|IfNotPresent|Never)$")
    """Always, IfNotPresent or Never."""
    command: list[Arg] | None = Field(default=None, min_length=1, max_length=256)
    """Custom trainer command (e.g. ["dtjob-run", "--", "torchrun", ...]); when set, the
    bundled trainer does not run, its rules (batch splits, micro-batches, model) are not
    checked, and the settings below are only passed on in the job config file. Unset: the
    container runs the bundled trainer (python -m dtjob_trainer run), whatever the image."""
    args: list[Arg] | None = Field(default=None, max_length=256)
    """Arguments of the custom command."""
    model: ModelSpec = Field(default_factory=ModelSpec)
    """Model of the bundled trainer."""
    dataset: DatasetSpec = Field(default_factory=DatasetSpec)
    """Data of the bundled trainer."""
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    """Optimizer of the bundled trainer."""
    batchSize: int = Field(default=64, ge=1, le=1048576)
    """Global batch size per step, across all data-parallel processes."""
    steps: int = Field(default=100, ge=1, le=100000000)
    """Total optimizer steps (updates per worker for the asynchronous modes)."""
    seed: int = Field(default=0, ge=0, le=2147483647)
    """Random seed: same seed and config, same result."""
    precision: Precision = Precision.FP32
    """fp32, fp64 (exact equivalence checks) or bf16 (GPU throughput)."""
    logEverySteps: int = Field(default=10, ge=1, le=1000000)
    """Log and progress-report interval in steps."""


# The checkpoint volume may not hide the operator's mounts (checked at apply).
CHECKPOINT_CEL = [
    {
        "rule": " && ".join(
            f"self.mountPath != '{d}' && !self.mountPath.startsWith('{d}/')"
            for d in (SHM_MOUNT_PATH, CONFIG_MOUNT_DIR)
        ),
        "message": f"mountPath may not be {SHM_MOUNT_PATH} or {CONFIG_MOUNT_DIR} or inside them: "
        "the operator mounts shared memory and the job config there",
        "fieldPath": ".mountPath",
        "reason": "FieldValueInvalid",
    }
]


class CheckpointSpec(ApiModel):
    """Where and how often the trainer checkpoints; resume on restart is automatic."""

    model_config = ApiModel.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": cast("list[JsonValue]", CHECKPOINT_CEL)}
    )

    claimName: str | None = Field(default=None, max_length=253, pattern=DNS1123_SUBDOMAIN)
    """PersistentVolumeClaim for checkpoints, in the job's namespace; ReadWriteMany when the
    gang has several pods. Without one they go to an emptyDir, which a gang restart loses
    (pods are recreated). The pods wait until a named claim exists; the CheckpointStorage
    condition says what applies."""
    mountPath: str = Field(default="/checkpoints", pattern=r"^/.*", max_length=1024)
    """Where the checkpoint volume is mounted in the trainer container."""
    everySteps: int = Field(default=50, ge=1, le=100000000)
    """Checkpoint interval in steps (a checkpoint is also written on SIGTERM)."""
    keep: int = Field(default=2, ge=1, le=100)
    """Checkpoints kept; older ones are deleted."""


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


class RunPolicy(ApiModel):
    """Restarts, deadlines and clean-up."""

    backoffLimit: int = Field(default=3, ge=0, le=1000)
    """Gang restarts allowed after retryable failures before the job fails."""
    restartPolicy: RestartPolicy = RestartPolicy.EXIT_CODE
    """ExitCode: exit codes 1-127 are permanent, 128+ (signals, OOM kill) retryable, unless
    listed below; OnFailure: every failure is retryable; Never: every failure is permanent."""
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
    admissionRetryLimit: int = Field(default=3, ge=0, le=1000)
    """Built-in admission: times a gang whose pods are not all ready within the operator's
    pods-ready timeout is released and re-queued; one more timeout fails the job with the
    reason its pods were not ready (e.g. ImagePullBackOff)."""
    cleanPodPolicy: CleanPodPolicy = CleanPodPolicy.RUNNING
    """When the job finishes: delete All pods, only Running ones (failed pods stay for their
    logs until the TTL), or None."""


class NetworkSpec(ApiModel):
    """Rendezvous and collective-communication settings."""

    masterPort: int = Field(default=29500, ge=1024, le=65535)
    """Port of the rank-0 rendezvous store."""
    rendezvousTimeoutSeconds: int = Field(default=300, ge=1, le=86400)
    """How long a process waits to reach rank 0 before failing with a retryable error."""
    shmSize: Quantity | None = None
    """Size of the memory-backed /dev/shm; default 1Gi per GPU (at least 1Gi)."""
    ncclSocketIfname: str | None = Field(default=None, max_length=64)
    """NCCL_SOCKET_IFNAME; by default the pod's eth0."""
    ncclDebug: str = Field(default="WARN", pattern=r"^(VERSION|WARN|INFO|TRACE)$")
    """NCCL_DEBUG level."""


class DistributedTrainingJobSpec(ApiModel):
    """A distributed training job: a strategy, the roles that run it and the trainer."""

    strategy: StrategySpec
    """Parallelism strategy."""
    roles: RolesSpec
    """Pods per role."""
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    """What the pods run."""
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    """Checkpoint location and interval."""
    runPolicy: RunPolicy = Field(default_factory=RunPolicy)
    """Restarts, deadlines and clean-up."""
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    """Rendezvous and NCCL settings."""
    suspend: bool = False
    """batch/v1 Job convention: true removes the pods and keeps the job; false resumes it."""
    priorityClassName: str | None = Field(default=None, max_length=253)
    """PriorityClass of the job's pods and of the job in the admission queue."""
