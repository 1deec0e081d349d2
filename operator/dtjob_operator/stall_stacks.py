"""Keeping a stalled gang's stacks before its restart deletes the pods (the side of
policies/stall_stacks.py that talks to the API server): the tails of a few pods' logs, cut
at their stall lines, go into the ConfigMap `<job>-stalls`, owned by the job. Best effort:
nothing here may hold up the restart, so a failure is logged and the restart goes on."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from dtjob_api import KIND
from dtjob_operator.builders.job import API_VERSION
from dtjob_operator.constants import LABEL_MANAGED_BY, MANAGED_BY, TRAINER_CONTAINER
from dtjob_operator.k8s import KubeApi
from dtjob_operator.naming import stalls_config_map_name
from dtjob_operator.policies.stall_stacks import (
    LOG_TAIL_LINES,
    STACKS_KEY,
    pods_to_read,
    stacks_document,
    stall_piece,
)

log = logging.getLogger(__name__)
# Not the job-name label: the operator's caches select its children by that label, and
# this ConfigMap is for people, not for the planner.
LABEL_STALLS_OF = "dtjob.io/stalls-of"


def keep_stall_stacks(
    api: KubeApi,
    pool: Executor,
    job: Mapping[str, Any],
    gang: Sequence[Mapping[str, Any]],
    progress: Mapping[str, Any] | None,
    said: str,
) -> None:
    """Read the stall pieces of the gang's logs and keep them in `<job>-stalls`."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    try:
        pods = pods_to_read(progress, gang)
        logs = list(
            pool.map(
                lambda pod: api.pod_log_tail(namespace, pod, TRAINER_CONTAINER, LOG_TAIL_LINES),
                pods,
            )
        )
        pieces = [(pod, stall_piece(text or "")) for pod, text in zip(pods, logs, strict=True)]
        # Collected with the job, as its other children are (builders/job.owner_reference).
        owner = {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": meta["uid"],
                 "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        api.put_config_map(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": stalls_config_map_name(name),
                    "namespace": namespace,
                    "labels": {LABEL_STALLS_OF: name, LABEL_MANAGED_BY: MANAGED_BY},
                    "ownerReferences": [owner],
                },
                "data": {STACKS_KEY: stacks_document(said, pieces)},
            }
        )
        found = sum(piece is not None for _, piece in pieces)
        log.info("kept the stacks of %d of %d pods of %s/%s", found, len(pods), namespace, name)
    except Exception as exc:  # the restart matters more than the record of it
        log.warning("could not keep the stacks of stalled %s/%s: %s", namespace, name, exc)
