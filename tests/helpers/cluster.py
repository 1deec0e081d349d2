"""Start, stop and query a local cluster through hack/cluster.py, the code `make
cluster-up` runs. It is stdlib-only, so any python runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLUSTER_PY = REPO / "hack" / "cluster.py"


def cluster_cmd(verb: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`hack/cluster.py up|down|status|kubeconfig`; env replaces the environment if given."""
    return subprocess.run(
        [sys.executable, str(CLUSTER_PY), verb],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
