"""The spec of a DistributedTrainingJob. Field docstrings become `kubectl explain` text.

The run policy (run_policy.py) and the bundled trainer's settings (trainer_spec.py) live in
their own modules so each file reads in one sitting; every name is re-exported here, so
`from dtjob_api.spec import RunPolicy` keeps working."""

import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dtjob_api.base import ApiModel
from dtjob_api.checkpoint import CHECKPOINT_CEL as CHECKPOINT_CEL
from dtjob_api.checkpoint import CheckpointSpec as CheckpointSpec
from dtjob_api.contract import (
    MANAGED_BY_MULTIKUEUE,
    MANAGED_BY_OPERATOR,
)
from dtjob_api.placement import PlacementSpec
from dtjob_api.resource_names import (
    DEFAULT_GPU_RESOURCE,
    EXTENDED_NAME_MESSAGE,
    EXTENDED_NAME_RULE,
    EXTENDED_RESOURCE_PATTERN,
    GPU_IN_EXTENDED_MESSAGE,
    MAX_EXTENDED_RESOURCES,
    RESOURCE_NAME_MAX,
    ROLE_RESOURCE_RULES,
    WHOLE_UNITS_PATTERN,
    is_extended_resource,
    is_extra_resource_name,
)
from dtjob_api.resource_names import DNS1123_SUBDOMAIN as DNS1123_SUBDOMAIN

# Every run_policy and trainer_spec name is re-exported (`X as X`: mypy --strict then counts
# it as part of this module).
from dtjob_api.run_policy import ONE_MATCHER as ONE_MATCHER
from dtjob_api.run_policy import CleanPodPolicy as CleanPodPolicy
from dtjob_api.run_policy import ExitCode as ExitCode
from dtjob_api.run_policy import ExitCodeOperator as ExitCodeOperator
from dtjob_api.run_policy import PodFailureAction as PodFailureAction
from dtjob_api.run_policy import PodFailurePolicy as PodFailurePolicy
from dtjob_api.run_policy import (
    PodFailurePolicyOnExitCodes as PodFailurePolicyOnExitCodes,
)
from dtjob_api.run_policy import (
    PodFailurePolicyOnPodCondition as PodFailurePolicyOnPodCondition,
)
from dtjob_api.run_policy import PodFailurePolicyRule as PodFailurePolicyRule
from dtjob_api.run_policy import RestartPolicy as RestartPolicy
from dtjob_api.run_policy import RunPolicy as RunPolicy
from dtjob_api.run_policy import StallPolicy as StallPolicy
from dtjob_api.template_spec import PodTemplate
from dtjob_api.trainer_spec import Arg as Arg
from dtjob_api.trainer_spec import DatasetSpec as DatasetSpec
from dtjob_api.trainer_spec import DatasetType as DatasetType
from dtjob_api.trainer_spec import ModelSpec as ModelSpec
from dtjob_api.trainer_spec import ModelType as ModelType
from dtjob_api.trainer_spec import OptimizerSpec as OptimizerSpec
from dtjob_api.trainer_spec import OptimizerType as OptimizerType
from dtjob_api.trainer_spec import Precision as Precision
from dtjob_api.trainer_spec import TokenDtype as TokenDtype
from dtjob_api.trainer_spec import TrainerSpec as TrainerSpec

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
# An amount of an extended resource: a quantity in whole units (resource_names.py).
DeviceQuantity = Annotated[
    str,
    Field(
        pattern=WHOLE_UNITS_PATTERN,
        max_length=64,
        json_schema_extra={"x-kubernetes-int-or-string": True},
    ),
    BeforeValidator(_int_to_quantity),
]
# A DNS-1123 subdomain (PersistentVolumeClaim names), as the core API checks it.


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
    TENSOR_PARALLEL = "TensorParallel"
    # tf.distribute names, aliases of the strategies above (aliases.py resolves them).
    MIRRORED_STRATEGY = "MirroredStrategy"
    MULTI_WORKER_MIRRORED_STRATEGY = "MultiWorkerMirroredStrategy"
    CENTRAL_STORAGE_STRATEGY = "CentralStorageStrategy"
    PARAMETER_SERVER_STRATEGY = "ParameterServerStrategy"


class PSMode(StrEnum):
    """Parameter-server update rule."""

    SYNC = "Sync"
    ASYNC = "Async"
    HOGWILD = "Hogwild"
    EASGD = "EASGD"
    EASGD_ROUND_ROBIN = "EASGDRoundRobin"


class PipelineSchedule(StrEnum):
    """Micro-batch schedule: torch.distributed.pipelining's, or an asynchronous one of the
    trainer's own (PipeDream, PipeDream2BW)."""

    GPIPE = "GPipe"
    ONE_F_ONE_B = "1F1B"
    INTERLEAVED_1F1B = "Interleaved1F1B"
    PIPEDREAM = "PipeDream"
    PIPEDREAM_2BW = "PipeDream2BW"


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


class ParameterServerSpec(ApiModel):
    """Settings of the ParameterServer strategy."""

    mode: PSMode = PSMode.SYNC
    """Update rule: Sync (all workers' gradients averaged every step), Async (Downpour:
    workers push gradients and pull parameters without a barrier), Hogwild (lock-free
    updates to shared parameters by several processes in one pod), EASGD (elastic averaging),
    EASGDRoundRobin (elastic averaging with the workers taking turns at one master's centre)."""
    rho: float = Field(default=0.1, ge=0.0, le=10.0)
    """EASGD elasticity: how strongly workers are pulled towards the centre parameters."""
    tau: int = Field(default=4, ge=1, le=100000)
    """EASGD communication period: workers exchange with the centre every tau steps."""
    hogwildProcesses: int = Field(default=2, ge=1, le=64)
    """Hogwild: processes per worker pod that update the shared parameters lock-free."""


class PipelineSpec(ApiModel):
    """Settings of the Pipeline and Hybrid strategies."""

    schedule: PipelineSchedule = PipelineSchedule.GPIPE
    """Micro-batch schedule: GPipe, 1F1B (needs microbatches >= stages) or Interleaved1F1B;
    or an asynchronous one, strategy Pipeline only: PipeDream (1F1B, an update after every
    micro-batch, weight stashing) or PipeDream2BW (one update per step, delayed by a step;
    needs microbatches >= stages)."""
    microbatches: int = Field(default=4, ge=1, le=4096)
    """Micro-batches each global batch is split into; the batch size must divide evenly."""
    stagesPerRank: int = Field(default=2, ge=1, le=16)
    """Interleaved1F1B only: model chunks (virtual stages) each pipeline rank holds."""


class HybridSpec(ApiModel):
    """Settings of the Hybrid (pipeline x data parallel) strategy."""

    dataParallel: int = Field(default=2, ge=1, le=1024)
    """Data-parallel degree; the pipeline degree is the stage processes divided by it."""


class TensorParallelSpec(ApiModel):
    """Settings of Megatron-style tensor parallelism: the TensorParallel strategy
    (optionally x data parallel), or each stage of a Pipeline or Hybrid job (3-D
    parallelism: pipeline x data parallel x tensor parallel)."""

    size: int = Field(default=2, ge=1, le=1024)
    """Processes each layer is split over (attention by heads, MLPs by features).
    TensorParallel: the worker processes must be a multiple of it, and the data-parallel
    degree is their quotient. Pipeline and Hybrid: every stage is split over `size`
    processes, and the pipeline degree is the stage processes / (dataParallel x size).
    Consecutive ranks share a split: set procsPerPod (or gpus) to it to keep the split
    inside a pod."""


class StrategySpec(ApiModel):
    """The parallelism strategy and its settings."""

    type: StrategyType
    """DataParallel, ParameterServer, ModelParallel, Pipeline, Hybrid, FSDP, CPUOffload or
    Auto (chosen from model size vs GPU memory; the choice and its reason go to status).
    tf.distribute names are aliases: MirroredStrategy and MultiWorkerMirroredStrategy run
    DataParallel, CentralStorageStrategy CPUOffload, ParameterServerStrategy ParameterServer
    in mode Async; status.strategy shows what runs."""
    backend: BackendType = BackendType.AUTO
    """Collective backend; auto means nccl when the pods have GPUs, gloo otherwise."""
    parameterServer: ParameterServerSpec | None = None
    """ParameterServer settings (only with type ParameterServer)."""
    pipeline: PipelineSpec | None = None
    """Pipeline settings (only with type Pipeline or Hybrid)."""
    hybrid: HybridSpec | None = None
    """Hybrid settings (only with type Hybrid)."""
    tensorParallel: TensorParallelSpec | None = None
    """Tensor-parallel settings: with type TensorParallel, or with Pipeline or Hybrid to
    split every stage (schedules GPipe, 1F1B, Interleaved1F1B; no stage groups)."""


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
    extendedResources: dict[str, DeviceQuantity] | None = Field(
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


MAX_STAGE_GROUPS = 8
GROUP_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Rules inside roles.stage (self = the stage role); rules.py holds those that need the rest
# of the spec. The operator checks the same in StageRoleSpec's validator.
GROUPS_REPLICAS_MESSAGE = "the groups' replicas must add up to roles.stage.replicas"
GROUPS_ONE_PROCESS_MESSAGE = (
    "with groups every stage pod runs one process on its group's device: leave "
    "roles.stage.gpus 0 and procsPerPod unset or 1 (set gpus per group)"
)
GROUPS_BLOCKS_MESSAGE = "set blocks on every group or on none (none: balanced by the trainer)"
STAGE_GROUP_RULES: list[Any] = [
    {
        "rule": "!has(self.groups) || self.groups.map(g, g.replicas).sum() == self.replicas",
        "message": GROUPS_REPLICAS_MESSAGE,
        "fieldPath": ".groups",
    },
    {
        "rule": "!has(self.groups) || (self.gpus == 0 && "
        "(!has(self.procsPerPod) || self.procsPerPod == 1))",
        "message": GROUPS_ONE_PROCESS_MESSAGE,
        "fieldPath": ".groups",
    },
    {
        "rule": "!has(self.groups) || self.groups.all(g, has(g.blocks)) || "
        "self.groups.all(g, !has(g.blocks))",
        "message": GROUPS_BLOCKS_MESSAGE,
        "fieldPath": ".groups",
    },
]


class StageGroupSpec(ApiModel):
    """Consecutive stage pods with their own device and resources (a heterogeneous
    pipeline: e.g. the first blocks on CPU pods with much memory, the rest on GPU pods)."""

    name: str = Field(max_length=20, pattern=GROUP_NAME_PATTERN)
    """Group name, unique in the role."""
    replicas: int = Field(default=1, ge=1, le=4096)
    """Stage pods (pipeline stages) of this group."""
    gpus: int = Field(default=0, ge=0, le=1)
    """0: the group's stages run on the CPU; 1: on one GPU (of roles.stage.gpuResource)."""
    cpu: Quantity | None = None
    """CPU per pod (requests = limits); default roles.stage.cpu."""
    memory: Quantity | None = None
    """Memory per pod (requests = limits); default roles.stage.memory."""
    blocks: int | None = Field(default=None, ge=1, le=4096)
    """Model blocks each stage of this group holds; unset: balanced by the trainer."""


class StageRoleSpec(RoleSpec):
    """The stage role: a RoleSpec, optionally split into groups of pods."""

    groups: list[StageGroupSpec] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_STAGE_GROUPS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Stage groups in pipeline order (Pipeline, ModelParallel): stage pods 0.. belong to
    the first group, and so on; replicas must equal the groups' sum."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [*ROLE_RESOURCE_RULES, *STAGE_GROUP_RULES]}
    )

    @model_validator(mode="after")
    def _groups_fit(self) -> "StageRoleSpec":
        groups = self.groups or []
        if not groups:
            return self
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise ValueError(f"groups: names must be unique (got {', '.join(names)})")
        total = sum(g.replicas for g in groups)
        if total != self.replicas:
            raise ValueError(f"groups: {GROUPS_REPLICAS_MESSAGE} ({total} != {self.replicas})")
        if self.gpus != 0 or self.processes() != 1:
            raise ValueError(f"groups: {GROUPS_ONE_PROCESS_MESSAGE}")
        if len({g.blocks is None for g in groups}) > 1:
            raise ValueError(f"groups: {GROUPS_BLOCKS_MESSAGE}")
        return self

    def group_of(self, index: int) -> StageGroupSpec | None:
        """The group of stage pod `index` (None without groups)."""
        for group in self.groups or []:
            if index < group.replicas:
                return group
            index -= group.replicas
        return None

    def pod_role(self, index: int) -> RoleSpec:
        """The role as stage pod `index` gets it: its group's gpus, cpu and memory."""
        group = self.group_of(index)
        if group is None:
            return self
        update = {"gpus": group.gpus, "cpu": group.cpu or self.cpu}
        return self.model_copy(update={**update, "memory": group.memory or self.memory})


class WorkerRoleSpec(RoleSpec):
    """The worker role: a RoleSpec that may be elastic."""

    minReplicas: int | None = Field(default=None, ge=1, le=4096)
    """Elastic: the fewest worker pods the job runs with (replicas is the most). It is
    admitted at the largest size that fits, grows into free capacity and shrinks instead of
    being preempted whole (docs/admission.md, "Elastic jobs")."""

    @property
    def elastic(self) -> bool:
        return self.minReplicas is not None and self.minReplicas < self.replicas


class RolesSpec(ApiModel):
    """The job's roles; which are required or forbidden depends on the strategy."""

    worker: WorkerRoleSpec | None = None
    """Workers: every strategy except ModelParallel, Pipeline and Hybrid."""
    ps: RoleSpec | None = None
    """Parameter servers: ParameterServer strategy only."""
    stage: StageRoleSpec | None = None
    """Pipeline stages: ModelParallel, Pipeline and Hybrid only."""


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
    placement: PlacementSpec | None = None
    """Topology placement of the gang."""
    managedBy: str | None = Field(
        default=None,
        pattern=rf"^({re.escape(MANAGED_BY_OPERATOR)}|{re.escape(MANAGED_BY_MULTIKUEUE)})$",
    )
    """Who runs the job: empty or dtjob.io/operator, the operator of this cluster;
    kueue.x-k8s.io/multikueue, a worker cluster Kueue's MultiKueue dispatches it to (this
    cluster only queues it; docs/multikueue.md). Immutable."""
