"""A job whose pods mount a Secret that does not exist, on the real kubelet: the pods hang in
ContainerCreating and the kubelet says why only in FailedMount events on each pod; the job
must say it in its own status (status.reason, the Running condition, the REASON column)."""

from __future__ import annotations

import time

from helpers.realnode import E2E

SECRET = "dtjob-e2e-no-such-secret"


def test_a_missing_secret_volume_is_named_in_the_jobs_status(e2e: E2E, e2e_namespace: str) -> None:
    ns = e2e_namespace
    job = e2e.apply_example(
        "data-parallel", ns,
        roles__worker__template__volumes=[{"name": "creds", "secret": {"secretName": SECRET}}],
        roles__worker__template__volumeMounts=[
            {"name": "creds", "mountPath": "/creds", "readOnly": True}
        ],
    )  # fmt: skip
    name = job["metadata"]["name"]
    started = time.monotonic()
    deadline = started + 180
    while True:
        st = e2e.job(ns, name).get("status", {})
        if st.get("reason") == "FailedMount":
            break
        assert time.monotonic() < deadline, (st, e2e.kubectl("get", "events", "-n", ns))
        time.sleep(1)
    shown = time.monotonic() - started
    running = next(c for c in st["conditions"] if c["type"] == "Running")
    assert running["status"] == "False" and running["reason"] == "FailedMount"
    message = running["message"]
    # The kubelet's own words: MountVolume.SetUp failed for volume "creds" : secret "..." not found
    assert f'secret "{SECRET}" not found' in message and f"pod {name}-worker-" in message, message
    assert st["phase"] == "Starting", st
    row = e2e.kubectl("get", "dtj", "-n", ns, name, "--no-headers")
    assert "FailedMount" in row.split(), row
    events = e2e.get("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    assert any(e["reason"] == "FailedMount" for e in events["items"]), events["items"]
    print(f"\nFailedMount shown after {shown:.1f}s: {message}")
