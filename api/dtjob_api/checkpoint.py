"""spec.checkpoint: where and how often the trainer checkpoints (apart from spec.py so that
each file reads in one sitting; `from dtjob_api.spec import CheckpointSpec` keeps working)."""

from typing import cast

from pydantic import ConfigDict, Field, JsonValue

from dtjob_api.base import ApiModel
from dtjob_api.contract import CONFIG_MOUNT_DIR, SHM_MOUNT_PATH
from dtjob_api.paths import cel_not_reserved, cel_plain
from dtjob_api.resource_names import DNS1123_SUBDOMAIN

# The checkpoint volume may not hide the operator's mounts (checked at apply; paths.py says
# why a path must be plain first).
CHECKPOINT_CEL = [
    {
        "rule": cel_plain("self.mountPath"),
        "message": "mountPath must be an absolute path written plainly, without '//', '.' or "
        "'..' components (e.g. /checkpoints)",
        "fieldPath": ".mountPath",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": cel_not_reserved("self.mountPath"),
        "message": f"mountPath may not be {SHM_MOUNT_PATH} or {CONFIG_MOUNT_DIR} or inside them: "
        "the operator mounts shared memory and the job config there",
        "fieldPath": ".mountPath",
        "reason": "FieldValueInvalid",
    },
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
