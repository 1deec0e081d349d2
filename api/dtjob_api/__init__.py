"""The DistributedTrainingJob API: pydantic models are the single source of truth for the
CRD schema (see crd.py), for validation in the operator and for `kubectl explain`."""

from dtjob_api.spec import (
    BackendType,
    CheckpointSpec,
    CleanPodPolicy,
    DistributedTrainingJobSpec,
    NetworkSpec,
    PipelineSchedule,
    PSMode,
    RestartPolicy,
    RoleName,
    RoleSpec,
    RunPolicy,
    StrategySpec,
    StrategyType,
    TrainerSpec,
)
from dtjob_api.status import (
    Condition,
    DistributedTrainingJobStatus,
    JobPhase,
    Progress,
    ReplicaStatus,
)

GROUP = "dtjob.io"
VERSION = "v1alpha1"
KIND = "DistributedTrainingJob"
PLURAL = "distributedtrainingjobs"
SINGULAR = "distributedtrainingjob"
SHORT_NAMES = ["dtj"]

__all__ = [
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "BackendType",
    "CheckpointSpec",
    "CleanPodPolicy",
    "Condition",
    "DistributedTrainingJobSpec",
    "DistributedTrainingJobStatus",
    "JobPhase",
    "NetworkSpec",
    "PSMode",
    "PipelineSchedule",
    "Progress",
    "ReplicaStatus",
    "RestartPolicy",
    "RoleName",
    "RoleSpec",
    "RunPolicy",
    "StrategySpec",
    "StrategyType",
    "TrainerSpec",
]
