"""`helm uninstall` removes everything the chart made except the CRDs (the chart's CRD
template carries `helm.sh/resource-policy: keep`: deleting it would delete every job). Runs
last in the tier and installs the release again for later sessions."""

from __future__ import annotations

import subprocess

from helpers.cluster import REPO
from helpers.realnode import E2E, RELEASE, RELEASE_NS


def test_helm_uninstall_keeps_only_the_crds(e2e: E2E) -> None:
    helm = [str(REPO / "hack" / "realnode-helm.sh")]
    subprocess.run([*helm, "uninstall"], env=e2e.env, check=True, capture_output=True)
    sel = f"app.kubernetes.io/instance={RELEASE}"
    left = e2e.get("deploy,svc,sa,pods", "-n", RELEASE_NS, "-l", sel)["items"]
    assert [o for o in left if not o["metadata"].get("deletionTimestamp")] == []
    assert e2e.get("clusterrole,clusterrolebinding", "-l", sel)["items"] == []
    e2e.get("crd", "distributedtrainingjobs.dtjob.io")  # still there
    subprocess.run([*helm, "install"], env=e2e.env, check=True, capture_output=True)
