"""What the client tests share: a GPU quota, the history ConfigMap as rank 0 writes it,
and `kubectl dtj` run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from helpers.kube import GPU, wait_for

TOP = Path(__file__).resolve().parents[3]
COLUMNS = ["step", "loss", "accuracy", "samplesPerSecond", "lr", "time"]


def set_gpu_quota(core: client.CoreV1Api, ns: str, gpus: int, name: str = "gpu-quota") -> None:
    core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": name}, "spec": {"hard": {f"requests.{GPU}": str(gpus)}}}
    )
    wait_for(
        lambda: (core.read_namespaced_resource_quota(name, ns).status.hard or {}).get(
            f"requests.{GPU}"
        ) == str(gpus),
        what=f"quota {name} computed",
    )  # fmt: skip


def write_history(core: client.CoreV1Api, ns: str, job: str, rows: list[list[Any]]) -> None:
    """The `<job>-history` ConfigMap, created or replaced (the operator may own it)."""
    name = f"{job}-history"
    data = {"history.json": json.dumps({"columns": COLUMNS, "rows": rows, "stride": 1})}
    try:
        core.create_namespaced_config_map(ns, {"metadata": {"name": name}, "data": data})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        core.patch_namespaced_config_map(name, ns, {"data": data})


def dtj(kubeconfig: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`kubectl dtj ...` through its module entry point, in a process of its own."""
    path = os.pathsep.join(str(TOP / p) for p in ("api", "client"))
    return subprocess.run(
        [sys.executable, "-m", "dtjob_client.cli", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
