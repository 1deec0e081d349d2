"""Shared pytest configuration for every test tree.

Markers (registered in pyproject.toml, --strict-markers) follow the directory, so a test
cannot forget them: tests/integration needs the control plane, tests/e2e a real node too,
tests/gpu a CUDA device. `make test` runs `-m "not e2e and not gpu"`, `make test-gpu` the
GPU tier.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_BY_DIR = {
    "integration": pytest.mark.integration,
    "e2e": pytest.mark.e2e,
    "gpu": pytest.mark.gpu,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        path = Path(item.path)
        parts = path.relative_to(root).parts if path.is_relative_to(root) else ()
        if parts and parts[0] in _BY_DIR:
            item.add_marker(_BY_DIR[parts[0]])
