"""Reading example manifests: the DistributedTrainingJob of a file that may carry other
objects along (examples/cpu/custom-model.yaml: the ConfigMap of its code first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

KIND = "DistributedTrainingJob"


def manifest_docs(path: Path) -> list[dict[str, Any]]:
    """Every object of a manifest, in order."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def load_job(path: Path) -> dict[str, Any]:
    """The one job of a manifest."""
    jobs = [d for d in manifest_docs(path) if d.get("kind") == KIND]
    assert len(jobs) == 1, f"{path}: one {KIND} per manifest"
    return jobs[0]
