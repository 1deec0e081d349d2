"""The chart installed with `helm install` runs the operator image on the real node, with
the chart's least-privilege RBAC and an unprivileged pod; `helm test` passes."""

from __future__ import annotations

import subprocess

from helpers.cluster import REPO
from helpers.realnode import E2E, RELEASE, RELEASE_NS, pushed, registry_digest


def test_operator_runs_from_our_image_unprivileged_on_the_real_node(e2e: E2E) -> None:
    pods = e2e.get("pods", "-n", RELEASE_NS, "-l", "app.kubernetes.io/instance=" + RELEASE)
    [pod] = pods["items"]
    assert pod["spec"]["nodeName"] == "dtjob-real-0"
    # Pulled from the real node's registry (hack/images.sh pushed it; nothing is imported):
    # the node reports the registry's own manifest digest for it.
    reg, tag = pushed()["REGISTRY"], pushed()["TAG"]
    assert pod["spec"]["containers"][0]["image"] == f"{reg}/dtjob-operator:{tag}"
    [status] = pod["status"]["containerStatuses"]
    digest = registry_digest(reg, "dtjob-operator", tag)
    assert status["imageID"] == f"{reg}/dtjob-operator@{digest}"
    assert status["ready"]
    sc = pod["spec"]["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] != 0
    csc = pod["spec"]["containers"][0]["securityContext"]
    assert csc["allowPrivilegeEscalation"] is False and not csc.get("privileged")
    # It talks to the apiserver as its own ServiceAccount, through kubernetes.default.
    sa = pod["spec"]["serviceAccountName"]
    can = e2e.kubectl("auth", "can-i", "create", "pods",
                      f"--as=system:serviceaccount:{RELEASE_NS}:{sa}", check=False)  # fmt: skip
    cannot = e2e.kubectl("auth", "can-i", "create", "deployments",
                         f"--as=system:serviceaccount:{RELEASE_NS}:{sa}", check=False)  # fmt: skip
    assert can.strip() == "yes" and cannot.strip() == "no"


def test_helm_test_reaches_the_operator_metrics_through_its_service(e2e: E2E) -> None:
    proc = subprocess.run(
        [str(REPO / "hack" / "realnode-helm.sh"), "test"],
        env=e2e.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Phase:          Succeeded" in proc.stdout, proc.stdout
