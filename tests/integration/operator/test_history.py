"""The loss history and the per-job gauges against the real control plane: the operator
creates `<job>-history` as a child like the progress ConfigMap (labels, owner, removed by
Kubernetes' garbage collector with the job); the job's service-account token can patch it
through the progress helper and can patch nothing else; the operator leaves the curve
alone; and a running job's progress appears as dtjob_job_* gauges on the operator's
/metrics, gone once the job is deleted."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from integration.operator.test_progress_helper import pod_identity
from kubernetes import client

from dtjob_operator.naming import history_config_map_name, progress_config_map_name, role_name
from dtjob_trainer.report import (
    HISTORY_COLUMNS,
    HISTORY_KEY,
    ConfigMapClient,
    history_from_env,
    reporter_from_env,
)
from helpers.jobs import (
    GROUP,
    PLURAL,
    VERSION,
    JobBuilder,
    create_job,
    get_job,
    status,
    wait_pods_running,
)
from helpers.kube import unique, wait_for

pytestmark = [pytest.mark.integration]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("dtjob_job"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


def a_running_job(cluster: Any, namespace: str, prefix: str) -> tuple[str, dict[str, Any]]:
    name = unique(prefix)
    create_job(cluster.api, namespace, JobBuilder(name).role("worker", 1).build())
    wait_pods_running(cluster.core, namespace, name, 1)
    job = get_job(cluster.api, namespace, name)
    assert job is not None
    return name, job


def delete_job(cluster: Any, namespace: str, name: str) -> None:
    client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )


@pytest.mark.usefixtures("metered_operator")
def test_history_config_map_is_a_child_only_the_jobs_account_can_write(
    cluster: Any, namespace: str, tmp_path: Path
) -> None:
    name, job = a_running_job(cluster, namespace, "history")
    cm = cluster.core.read_namespaced_config_map(history_config_map_name(name), namespace)
    assert cm.metadata.labels["dtjob.io/job-name"] == name
    (owner,) = cm.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("DistributedTrainingJob", name,
                                                   job["metadata"]["uid"])  # fmt: skip
    assert json.loads(cm.data[HISTORY_KEY]) == {
        "columns": list(HISTORY_COLUMNS), "rows": [], "stride": 1,
    }  # fmt: skip
    role = client.RbacAuthorizationV1Api(cluster.api).read_namespaced_role(
        role_name(name), namespace
    )
    assert [(r.resource_names, r.verbs) for r in role.rules] == [
        ([progress_config_map_name(name), history_config_map_name(name)], ["get", "patch"])
    ]

    # The pod's token, through the progress helper: the curve lands in the ConfigMap.
    env = pod_identity(cluster, namespace, name, tmp_path)
    env = {**env, "DTJ_HISTORY_CONFIGMAP": history_config_map_name(name)}
    recorder = history_from_env(env, sa_dir=str(tmp_path))
    for step in (10, 20, 30):
        recorder.add({"step": step, "loss": 3.0 / step, "lr": 0.01})
    assert recorder.flush() and recorder.failures == 0
    written = cluster.core.read_namespaced_config_map(history_config_map_name(name), namespace)
    rows = json.loads(written.data[HISTORY_KEY])["rows"]
    assert [r[:2] for r in rows] == [[10, 0.3], [20, 0.15], [30, 0.1]]

    # ...and nothing else: not the job's config, not another job's history.
    config = ConfigMapClient.in_cluster(
        namespace, f"{name}-config", env["KUBERNETES_SERVICE_HOST"],
        env["KUBERNETES_SERVICE_PORT"], str(tmp_path), key="config.json",
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        config.write("{}")
    assert refused.value.code == 403
    other = history_from_env({**env, "DTJ_HISTORY_CONFIGMAP": "someone-else-history"},
                             sa_dir=str(tmp_path))  # fmt: skip
    assert not other.add({"step": 1, "loss": 1.0}, force=True) and other.failures == 1

    # The operator's reconciles (a progress report wakes one) leave the curve as it is.
    assert reporter_from_env(env, sa_dir=str(tmp_path)).update({"step": 30}, force=True)
    wait_for(lambda: status(cluster.api, namespace, name).get("progress", {}).get("step") == 30,
             what="the progress copied into status")  # fmt: skip
    again = cluster.core.read_namespaced_config_map(history_config_map_name(name), namespace)
    assert again.data == written.data

    # Deleting the job deletes the history with it (Kubernetes' garbage collector).
    delete_job(cluster, namespace, name)
    wait_for(
        lambda: (
            not cluster.core.list_namespaced_config_map(
                namespace, field_selector=f"metadata.name={history_config_map_name(name)}"
            ).items
        ),
        what="the history ConfigMap collected with its job",
    )


@pytest.mark.usefixtures("metered_operator")
def test_a_running_jobs_progress_is_on_the_metrics_endpoint_until_it_is_deleted(
    cluster: Any, namespace: str, tmp_path: Path, metrics_port: int
) -> None:
    name, _ = a_running_job(cluster, namespace, "gauges")
    env = pod_identity(cluster, namespace, name, tmp_path)
    reporter = reporter_from_env(env, sa_dir=str(tmp_path))
    assert reporter.update(
        {"step": 40, "totalSteps": 100, "loss": 0.25, "samplesPerSecond": 512.0}, force=True
    )
    labels = f'{{job="{name}",namespace="{namespace}"}}'
    samples = wait_for(
        lambda: (m := scrape(metrics_port)).get(f"dtjob_job_step{labels}") == 40 and m,
        what="the job's step on /metrics",
    )
    assert samples[f"dtjob_job_loss{labels}"] == 0.25
    assert samples[f"dtjob_job_samples_per_second{labels}"] == 512.0
    assert samples[f"dtjob_job_total_steps{labels}"] == 100
    assert samples["dtjob_job_metrics_left_out_jobs"] == 0

    delete_job(cluster, namespace, name)
    wait_for(
        lambda: not any(labels in key for key in scrape(metrics_port)),
        what="the deleted job's series gone",
    )
