"""The names of the env contract that the API's rules need: the trainer container, the
volumes and mounts the operator adds, and the label prefix it owns.

The operator's constants module re-exports them (one spelling of each string); the API's
rules refuse a pod template that sets any of them.
"""

from typing import Final

DOMAIN: Final = "dtjob.io"
# Labels and annotations under this prefix are the operator's; pod-template overlays may not
# set them (a user label could otherwise move a pod into another job's gang).
RESERVED_PREFIX: Final = f"{DOMAIN}/"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
# spec.managedBy: who runs a job. Empty or this operator's own name: this operator (the
# cluster it was applied to). Kueue's MultiKueue: another cluster runs it, the one Kueue
# dispatched a copy to; here the operator only queues it (docs/multikueue.md).
MANAGED_BY_OPERATOR: Final = f"{DOMAIN}/operator"
MANAGED_BY_MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"

TRAINER_CONTAINER: Final = "trainer"
RENDEZVOUS_PORT_NAME: Final = "rendezvous"
CONFIG_MOUNT_DIR: Final = "/etc/dtjob"
SHM_MOUNT_PATH: Final = "/dev/shm"
# The pod volumes the operator adds; a role's pod template may not define volumes so named.
CONFIG_VOLUME: Final = "config"
SHM_VOLUME: Final = "dshm"
CHECKPOINT_VOLUME: Final = "checkpoints"
