"""Killing one trainer container mid-run restarts the whole gang, which resumes from its
checkpoint on a PVC (a hostPath PV made here) and still succeeds."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from helpers.realnode import E2E, watch_job


def test_killed_container_restarts_gang_and_resumes_from_checkpoint(
    e2e: E2E, e2e_namespace: str, tmp_path: Path
) -> None:
    ns = e2e_namespace
    claim = e2e.hostpath_claim(ns, Path("/tmp") / f"dtjob-{ns}-ckpt")
    job = e2e.apply_example(
        "data-parallel", ns, checkpoint__claimName=claim, checkpoint__everySteps=50,
        trainer__steps=300,
    )  # fmt: skip
    name = job["metadata"]["name"]
    deadline = time.monotonic() + 600
    while True:  # wait for a checkpoint, then kill worker-1's trainer container
        st = e2e.job(ns, name).get("status", {})
        ckpt = (st.get("progress") or {}).get("lastCheckpointStep") or 0
        if ckpt >= 100:
            break
        assert time.monotonic() < deadline, st
        time.sleep(1)
    pod = e2e.get("pod", "-n", ns, f"{name}-worker-1")
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[1]
    sock = e2e.env["CONTAINERD_SOCK"]
    subprocess.run(["ctr", "-a", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", cid],
                   check=True)  # fmt: skip
    after: list[int] = []

    def seen(obj: dict[str, Any], row: str) -> None:
        st = obj.get("status", {})
        progress = st.get("progress") or {}
        # The new gang's own reports only: until its rank 0 writes, the progress ConfigMap
        # (and so the status) still holds the killed gang's last report, which may trail
        # its last checkpoint by up to a report interval. RFC 3339 UTC compares as text.
        fresh = str(progress.get("updateTime", "")) >= str(st.get("lastRestartTime", "~"))
        if st.get("restarts", 0) >= 1 and st.get("phase") == "Running" and fresh:
            after.append(progress["step"])

    done = watch_job(e2e, ns, name, timeout=900, on_poll=seen)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["restarts"] >= 1
    assert after and min(after) >= ckpt, (ckpt, after)  # continued, not started over
    assert done["status"]["progress"]["step"] == 300
