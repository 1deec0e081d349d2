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


def _hack_cluster():  # type: ignore[no-untyped-def]
    """hack/cluster.py as a module (stdlib-only; its siblings are found on sys.path)."""
    hack = str(REPO / "hack")
    if hack not in sys.path:
        sys.path.insert(0, hack)
    import cluster  # type: ignore[import-not-found]

    return cluster


def stop_component(name: str) -> None:
    """Stop one component of the local cluster (DTJOB_CLUSTER_STATE's), e.g. kube-apiserver
    or etcd; the others keep running, as in a control-plane outage. Its data stays."""
    hc = _hack_cluster()
    hc.stop(hc.Config.from_env(), (name,))


def start_component(name: str, timeout: float = 200) -> None:
    """Start a component stopped by stop_component() again (same command line) and wait
    until the API server is ready.

    After a long etcd outage that takes a while: kube-apiserver's etcd client redials with
    gRPC's exponential backoff (capped at 120 s), so it may first try again more than a
    minute after etcd is back."""
    import time

    hc = _hack_cluster()
    cfg = hc.Config.from_env()
    bins = Path(cfg.state.joinpath("bin-dir").read_text().strip())
    hc.start(cfg, name, bins)
    api = hc.cluster_api.Api(cfg.server, cfg.pki)
    deadline = time.monotonic() + timeout
    while not api.ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"kube-apiserver not ready after {timeout}s")
        time.sleep(0.2)
