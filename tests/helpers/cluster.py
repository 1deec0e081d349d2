"""Start, stop and query a local cluster through hack/cluster.py, the code `make
cluster-up` runs. It is stdlib-only, so any python runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLUSTER_PY = REPO / "hack" / "cluster.py"


def cluster_cmd(verb: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`hack/cluster.py up|down|status|kubeconfig`; env replaces the environment if given.

    Bounded: a start that has to build the binaries first (minutes) comes back as exit 124
    with a message, instead of running into the test timeout.
    """
    argv = [sys.executable, str(CLUSTER_PY), verb]
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    except subprocess.TimeoutExpired as e:
        out = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        hint = "if it was building the binaries, run `make binaries` (or `make test`) first"
        msg = f"{out}\ncluster {verb} timed out; {hint}"
        return subprocess.CompletedProcess(argv, 124, "", msg)
