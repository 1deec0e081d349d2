"""A user's own image (examples/custom-image, built by hack/images.sh from its Dockerfile):
`torchrun` with 2 processes in each of 2 pods behind `dtjob-run`, progress through the
stdlib helper, checkpoints on a PVC. A child's retryable exit code restarts the gang, which
resumes from the checkpoint; a permanent one fails the job naming the child's exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from helpers.cluster import REPO
from helpers.realnode import E2E, place_on_real_node, pushed, watch_job

MANIFEST = REPO / "examples" / "custom-image" / "job.yaml"


def _apply(e2e: E2E, ns: str, name: str, args: list[str], claim: str | None = None) -> None:
    job: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    job["metadata"]["name"] = name
    place_on_real_node(job, cpu="500m")
    # The image as hack/images.sh pushed it to the node's registry (its tag follows content).
    got = pushed()
    job["spec"]["trainer"]["image"] = f"{got['REGISTRY']}/dtjob-custom-example:{got['CUSTOM_TAG']}"
    job["spec"]["trainer"]["args"] = args
    # A short progress deadline makes the heartbeats come every 3 s (a sixth of it; 10 s
    # by default): the ranks' summary shows within the run, whose gangs train for several of them.
    job["spec"]["runPolicy"]["progressDeadlineSeconds"] = 18
    if claim:
        job["spec"]["checkpoint"]["claimName"] = claim
    e2e.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(job))


def _condition(job: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


def test_torchrun_child_retryable_code_restarts_and_resumes_from_pvc(
    e2e: E2E, e2e_namespace: str
) -> None:
    ns, name = e2e_namespace, "custom-retry"
    claim = e2e.hostpath_claim(ns, Path("/tmp") / f"dtjob-{ns}-ckpt")
    # Checkpoint every 50 steps; rank 1 exits 75 at step 600, once (a resumed run goes on).
    # Each gang trains 600 steps, for a few 3-second heartbeats of every rank: with 300 a
    # gang, on the faster machine of 2026-11-29 evening, rank 0 had heard none of the other
    # ranks' beats once (1 of 4 reporting) when the run ended.
    _apply(e2e, ns, name, ["--steps", "1200", "--fail-at-step", "600"], claim=claim)
    rows: list[tuple[int, str]] = []  # (status step, printed row)
    restart_messages: list[str] = []
    ranks: list[dict[str, Any]] = []  # the heartbeats' summaries seen

    def seen(obj: dict[str, Any], row: str) -> None:
        st = obj.get("status", {})
        progress = st.get("progress") or {}
        if st.get("phase") == "Running":  # rank 0's progress.json, as it reported it
            said = e2e.kubectl("get", "configmap", "-n", ns, f"{name}-progress", "-o",
                               r"jsonpath={.data.progress\.json}", check=False)  # fmt: skip
            summary = json.loads(said or "{}").get("ranks")
            if isinstance(summary, dict):
                ranks.append(summary)
        if progress.get("step") and progress.get("loss") is not None:
            rows.append((progress["step"], row))
        if msg := _condition(obj, "Restarting").get("message"):
            restart_messages.append(msg)

    done = watch_job(e2e, ns, name, timeout=900, on_poll=seen)
    st = done["status"]
    assert st["phase"] == "Succeeded", st
    assert st["restarts"] == 1, st
    assert st["progress"]["step"] == 1200, st
    # The new gang came back at the step-600 checkpoint, not at 0 (its rank 0 says so; the
    # status may show the old gang's last report until the new one's first).
    log = e2e.kubectl("logs", "-n", ns, f"{name}-worker-0", check=False)
    assert "resuming at step 600" in log, log[-2000:]
    # Classified by the child's code, not torchrun's own exit 1.
    assert any("code 75" in m and "torchrun" in m for m in restart_messages), restart_messages
    # The image's heartbeat() calls reached the operator through the helper copied in as
    # one file: rank 0's summary of the 4 ranks (2 pods x 2 torchrun children), with the
    # beats of ranks in the other pod read too (the last gang's stays in the ConfigMap).
    said = e2e.kubectl("get", "configmap", "-n", ns, f"{name}-progress", "-o",
                       r"jsonpath={.data.progress\.json}")  # fmt: skip
    ranks.append(json.loads(said).get("ranks") or {})
    assert any(r.get("count") == 4 and r.get("reporting", 0) >= 3 for r in ranks), ranks[-3:]
    # STEP and LOSS were in `kubectl get dtj` while it ran: the step, then the loss.
    assert any(_step_then_loss(step, row) for step, row in rows), rows[-5:]


def _step_then_loss(step: int, row: str) -> bool:
    cells = row.split()
    if str(step) not in cells[:-1]:
        return False
    try:
        float(cells[cells.index(str(step)) + 1])
    except ValueError:
        return False
    return True


def test_torchrun_child_permanent_code_fails_naming_the_child(e2e: E2E, e2e_namespace: str) -> None:
    ns, name = e2e_namespace, "custom-permanent"
    _apply(e2e, ns, name, ["--steps", "200", "--fail-at-step", "10", "--fail-code", "3"])
    done = watch_job(e2e, ns, name, timeout=600)
    st = done["status"]
    assert st["phase"] == "Failed", st
    assert st.get("restarts", 0) == 0, st
    failed = _condition(done, "Failed")
    assert failed["reason"] == "PodFailedPermanent", failed
    assert "code 3" in failed["message"] and "torchrun" in failed["message"], failed
