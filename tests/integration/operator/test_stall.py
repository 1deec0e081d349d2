"""Stall detection on the real control plane (issue 36; policies/stall.py). KWOK keeps the
pods Running whatever happens, as a hung gang's pods are; the test writes what rank 0's
trainer writes (the progress ConfigMap) and then stops writing, as a hung trainer does."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from helpers.jobs import (
    JobBuilder,
    create_job,
    job_pods,
    patch_job,
    status,
    wait_phase,
    wait_pods_running,
)
from helpers.kube import events_for, unique, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
DEADLINE = 10  # runPolicy.progressDeadlineSeconds' least value


def _job(name: str) -> dict[str, Any]:
    return (
        JobBuilder(name)
        .strategy("DataParallel")
        .role("worker", 2, gpus=1)
        .run_policy(progressDeadlineSeconds=DEADLINE, backoffLimit=3)
        .build()
    )


def _report(cluster: Any, ns: str, name: str, step: int) -> None:
    """What rank 0 writes after a step (docs/env-contract.md), and the watch taking it in."""
    progress = {"step": step, "totalSteps": 1000, "loss": 1.0 / step}
    cluster.core.patch_namespaced_config_map(
        f"{name}-progress", ns, {"data": {"progress.json": json.dumps(progress)}}
    )
    wait_for(
        lambda: (status(cluster.api, ns, name).get("progressWatch") or {}).get("step") == step,
        30, what=f"the stall watch at step {step}",
    )  # fmt: skip


def _moving(cluster: Any, ns: str, name: str) -> set[str]:
    """A Running gang that made two steps (a move the watch judges from); its pods' uids."""
    pods = wait_pods_running(cluster.core, ns, name, 2)
    wait_phase(cluster.api, ns, name, "Running")
    for step in (1, 2):
        _report(cluster, ns, name, step)
    return {p.metadata.uid for p in pods}


def test_a_gang_whose_step_stands_still_is_stalled_and_restarted_once(
    cluster: Any, namespace: str
) -> None:
    ns, name = namespace, unique("still")
    create_job(cluster.api, ns, _job(name))
    first = _moving(cluster, ns, name)

    stalled = wait_for(lambda: events_for(cluster.core, ns, name, "Stalled"), 90,
                       what="a Stalled event")  # fmt: skip
    assert "training stalled: step 2 has not moved for" in stalled[0].message, stalled[0].message
    assert f"deadline {DEADLINE}s, runPolicy.progressDeadlineSeconds" in stalled[0].message
    # The gang is replaced whole, and the restart is a counted one.
    wait_for(
        lambda: (
            len(pods := job_pods(cluster.core, ns, name)) == 2
            and not {p.metadata.uid for p in pods} & first
            and all(p.status.phase == "Running" for p in pods)
        ),
        90, what="a new gang of two Running pods",
    )  # fmt: skip
    st = wait_phase(cluster.api, ns, name, "Running")
    assert st["restarts"] == 1 and st.get("countedRestarts", 1) == 1, st
    kept = cluster.core.read_namespaced_config_map(f"{name}-stalls", ns)
    assert "training stalled: step 2" in kept.data["stacks.txt"], kept.data
    # The new gang inherits the ConfigMap's step 2 as a baseline, not as its own progress:
    # it is not judged (and not restarted again) until its own step moves.
    time.sleep(2 * DEADLINE)
    assert len(events_for(cluster.core, ns, name, "Stalled")) == 1
    assert status(cluster.api, ns, name)["restarts"] == 1


def test_a_suspended_job_is_never_declared_stalled(cluster: Any, namespace: str) -> None:
    ns, name = namespace, unique("paused")
    create_job(cluster.api, ns, _job(name))
    _moving(cluster, ns, name)
    patch_job(cluster.api, ns, name, {"spec": {"suspend": True}})
    st = wait_phase(cluster.api, ns, name, "Suspended", timeout=60)
    assert "progressWatch" not in st, st
    time.sleep(2 * DEADLINE)  # twice the deadline with no step: still no stall
    assert not events_for(cluster.core, ns, name, "Stalled")
    assert status(cluster.api, ns, name)["phase"] == "Suspended"
