"""The progress helper of the env contract (dtjob_trainer.report) against the real API
server: with a token of the job's own ServiceAccount, as a pod has, it writes the job's
progress ConfigMap and the operator shows STEP and LOSS in the job's status; the same token
cannot write another job's progress."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from dtjob_operator.naming import progress_config_map_name, service_account_name
from dtjob_trainer import report as helper
from dtjob_trainer.report import report, reporter_from_env
from helpers.jobs import JobBuilder, create_job, status, wait_pods_running
from helpers.kube import unique, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]


def pod_identity(cluster, namespace: str, job: str, directory: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """What a pod of `job` has: its ServiceAccount's token and the cluster CA in a
    service-account directory, and the env the kubelet and the operator give it."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    token = cluster.core.create_namespaced_service_account_token(
        service_account_name(job), namespace, request
    )
    (directory / "token").write_text(token.status.token)
    shutil.copy(cluster.api.configuration.ssl_ca_cert, directory / "ca.crt")
    server = urlsplit(cluster.api.configuration.host)
    return {
        "RANK": "0",
        "DTJ_NAMESPACE": namespace,
        "DTJ_PROGRESS_CONFIGMAP": progress_config_map_name(job),
        "KUBERNETES_SERVICE_HOST": server.hostname or "",
        "KUBERNETES_SERVICE_PORT": str(server.port or 443),
    }


def test_helper_reports_progress_into_the_job_status(  # type: ignore[no-untyped-def]
    cluster, namespace, tmp_path, monkeypatch
) -> None:
    name = unique("helper")
    job = JobBuilder(name).strategy("DataParallel").role("worker", 1).build()
    create_job(cluster.api, namespace, job)
    wait_pods_running(cluster.core, namespace, name, 1)
    env = pod_identity(cluster, namespace, name, tmp_path)
    monkeypatch.setattr(helper, "_default", reporter_from_env(env, sa_dir=str(tmp_path)))

    assert report(step=40, total=100, loss=0.25, epoch=2, samples_per_sec=512.0, checkpoint=40)
    st = wait_for(
        lambda: (
            (s := status(cluster.api, namespace, name)).get("progress", {}).get("step") == 40 and s
        ),
        what="the helper's progress copied into the job's status",
    )
    progress = st["progress"]
    assert (progress["loss"], progress["totalSteps"], progress["epoch"]) == (0.25, 100, 2)
    assert progress["lastCheckpointStep"] == 40

    # The pod's token is good for its own job's ConfigMap only: refused, and not raised.
    other = {**env, "DTJ_PROGRESS_CONFIGMAP": progress_config_map_name("someone-else")}
    intruder = reporter_from_env(other, sa_dir=str(tmp_path))
    assert not intruder.update({"step": 1}, force=True)
    assert intruder.failures == 1
