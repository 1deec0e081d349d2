"""What the operator benchmarks share: the local cluster, the fake nodes' room, and the
operator process's CPU time and memory read from /proc."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

TOP = Path(__file__).resolve().parents[1]


def cluster_kubeconfig() -> Path:
    """Start the local cluster if it is not up (DTJOB_CLUSTER_STATE/PORT_BASE select which)
    and return its admin kubeconfig."""
    up = subprocess.run([sys.executable, str(TOP / "hack" / "cluster.py"), "up"], check=False)
    if up.returncode != 0:
        raise SystemExit("cluster did not start")
    out = subprocess.run(
        [sys.executable, str(TOP / "hack" / "cluster.py"), "kubeconfig"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def set_node_pod_slots(core: client.CoreV1Api, slots: str) -> dict[str, str]:
    """Give every fake node `slots` pod slots (110 by default, as a kubelet's); returns
    each node's former value, for restore_node_pod_slots."""
    former = {}
    for node in core.list_node(label_selector="type=kwok").items:
        former[node.metadata.name] = node.status.allocatable.get("pods", "110")
        res = {"pods": slots}
        core.patch_node_status(
            node.metadata.name, {"status": {"capacity": res, "allocatable": res}}
        )
    return former


def restore_node_pod_slots(core: client.CoreV1Api, former: dict[str, str]) -> None:
    for node, slots in former.items():
        res = {"pods": slots}
        core.patch_node_status(node, {"status": {"capacity": res, "allocatable": res}})


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def control_plane_pids(kubeconfig: Path) -> dict[str, int]:
    """The local cluster's processes (API server, etcd, controller manager, scheduler,
    KWOK) by name, from the pid files next to its kubeconfig; the ones not running are
    left out."""
    pids = {}
    for pidfile in sorted((kubeconfig.parent / "pids").glob("*.pid")):
        try:
            pid = int(pidfile.read_text())
            cpu_seconds(pid)
        except (OSError, ValueError):
            continue
        pids[pidfile.stem] = pid
    return pids


def memory_mib(pid: int) -> dict[str, float]:
    """Resident memory now (VmRSS) and at its peak (VmHWM), in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out["rss_mib" if key == "VmRSS" else "peak_rss_mib"] = round(
                int(value.split()[0]) / 1024, 1
            )
    return out


def git_commit() -> str:
    """The commit measured ("+changes" when the operator's code differs from it)."""
    out = subprocess.run(["git", "-C", str(TOP), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(TOP), "diff", "--quiet", "HEAD", "--", "operator"],
                           check=False).returncode  # fmt: skip
    return out.stdout.strip() + ("+changes" if dirty else "")


def record(path: Path, label: str, result: dict[str, Any], script: str, note: str) -> None:
    """Stamp a run's result (commit, time, command, machine) and keep it under `label` in
    the results file `path`, beside the runs kept under other labels; print it."""
    result["operator_commit"] = git_commit()
    result["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result["command"] = f"python bench/{script} " + shlex.join(sys.argv[1:])
    result["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "note": note,
    }
    results = json.loads(path.read_text()) if path.exists() else {}
    results[label] = result
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(result, indent=2))
