"""The job config ConfigMap (read by every pod), and the progress and loss-history ConfigMaps
(written by rank 0)."""

from __future__ import annotations

import json

from dtjob_operator.builders.job import Job, Manifest, child_metadata
from dtjob_operator.constants import CONFIG_KEY, HISTORY_COLUMNS, HISTORY_KEY, PROGRESS_KEY
from dtjob_operator.naming import (
    config_map_name,
    history_config_map_name,
    progress_config_map_name,
)


def config_json(job: Job) -> str:
    """The job's spec as the trainer reads it: camelCase, defaults filled, unset optionals
    left out, keys sorted so the same spec always gives the same bytes."""
    return json.dumps((job.declared or job.spec).to_api(), sort_keys=True, indent=2)


def build_config_map(job: Job) -> Manifest:
    """ConfigMap `<job>-config`, key config.json, mounted at DTJ_CONFIG."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, config_map_name(job.name)),
        "data": {CONFIG_KEY: config_json(job)},
    }


def build_progress_config_map(job: Job) -> Manifest:
    """ConfigMap `<job>-progress`, key progress.json, starting empty; rank 0 patches it and
    the operator copies it into status.progress."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, progress_config_map_name(job.name)),
        "data": {PROGRESS_KEY: "{}"},
    }


def empty_history() -> str:
    """The history document before the first point (the format the SDK and `kubectl dtj
    plot` read: docs/env-contract.md, "Loss history")."""
    return json.dumps({"columns": list(HISTORY_COLUMNS), "rows": [], "stride": 1})


def build_history_config_map(job: Job) -> Manifest:
    """ConfigMap `<job>-history`, key history.json, starting with no rows; rank 0 patches
    it, readers outside the cluster GET it. The operator never reads it back (its cache
    keeps only the metadata)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, history_config_map_name(job.name)),
        "data": {HISTORY_KEY: empty_history()},
    }
