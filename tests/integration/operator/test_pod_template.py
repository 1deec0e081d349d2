"""The role pod template with the operator running: the user's pod settings reach the pods,
a template the CRD accepts but the contract refuses ends Failed/InvalidSpec with no pods, and
a deeply nested template cannot take the operator down."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from dtjob_api import GROUP, PLURAL, VERSION
from helpers.jobs import JobBuilder, create_job, job_pods, wait_phase, wait_pods_running
from helpers.kube import unique, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
W = "spec.roles.worker.template"


def job_with(name: str, template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return (
        JobBuilder(name)
        .strategy("DataParallel")
        .role("worker", 2, gpus=1, template=template)
        .spec(**spec)
        .build()
    )


def test_pods_carry_the_users_template(cluster: Any, namespace: str) -> None:
    core = cluster.core
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "trainer-sa"}})
    name = unique("tpl")
    template = {
        "metadata": {"labels": {"team": "nlp"}},
        "spec": {
            "serviceAccountName": "trainer-sa",
            "imagePullSecrets": [{"name": "registry"}],
            "initContainers": [
                {"name": "fetch", "image": "busybox"},
                {"name": "log-shipper", "image": "busybox", "restartPolicy": "Always"},
            ],
            "containers": [
                {"name": "trainer", "env": [{"name": "HF_HOME", "value": "/data"}]},
                {"name": "exporter", "image": "exporter:1"},
            ],
        },
    }
    create_job(cluster.api, namespace, job_with(name, template))
    pods = wait_pods_running(core, namespace, name, 2)
    for pod in pods:
        spec = pod.spec
        assert spec.service_account_name == "trainer-sa"
        assert [s.name for s in spec.image_pull_secrets] == ["registry"]
        assert [c.name for c in spec.init_containers] == ["fetch", "log-shipper"]
        assert spec.init_containers[1].restart_policy == "Always"  # a native sidecar
        assert [c.name for c in spec.containers] == ["trainer", "exporter"]
        env = {e.name: e.value for e in spec.containers[0].env}
        assert env["HF_HOME"] == "/data" and env["WORLD_SIZE"] == "2"
        assert pod.metadata.labels["team"] == "nlp"
    # Progress reporting runs as the pods' account: it is bound to the job's progress Role.
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    binding = wait_for(
        lambda: rbac.list_namespaced_role_binding(namespace).items, 30, what="role binding"
    )[0]
    assert {s.name for s in binding.subjects} == {f"{name}-trainer", "trainer-sa"}


VOLUME = {"name": "data", "emptyDir": {}}
OVER_CONFIG = {"volumes": [VOLUME], "volumeMounts": [{"name": "data", "mountPath": "/etc/dtjob"}]}
RANK_ENV = {"spec": {"containers": [{"name": "trainer", "env": [{"name": "RANK", "value": "0"}]}]}}
# (id, template, extra spec, field in the Failed message): accepted by the API server,
# refused by the operator (what the schema cannot say).
REFUSED: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("volume-without-source", {"volumes": [{"name": "data"}]}, {}, f"{W}.volumes[0]"),
    ("volume-with-two-sources",
     {"volumes": [{"name": "data", "emptyDir": {}, "configMap": {"name": "c"}}]}, {},
     f"{W}.volumes[0]"),
    ("mount-of-unknown-volume", {"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}, {},
     f"{W}.volumeMounts[0].name"),
    ("mount-over-config", OVER_CONFIG, {}, f"{W}.volumeMounts[0].mountPath"),
    ("our-volume-name", {"spec": {"volumes": [{"name": "checkpoints", "emptyDir": {}}]}}, {},
     f"{W}.spec.volumes[0].name"),
    ("duplicate-volume", {"volumes": [VOLUME, VOLUME]}, {}, f"{W}.volumes[1].name"),
    ("reserved-env", RANK_ENV, {}, f"{W}.spec.containers[0].env[0].name"),
    ("host-path", {"volumes": [{"name": "h", "hostPath": {"path": "/var/lib"}}]}, {},
     f"{W}.volumes[0].hostPath"),
    ("label-value", {"labels": {"team": "not valid!"}}, {}, f"{W}.labels[team]"),
    ("annotations-too-large", {"annotations": {"blob": "x" * (256 * 1024 + 1)}}, {},
     f"{W}.annotations"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "extra", "field"), [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])  # fmt: skip
def test_contract_violation_fails_the_job_with_no_pods(
    cluster: Any, namespace: str, template: dict[str, Any], extra: dict[str, Any], field: str
) -> None:
    name = unique("bad")
    create_job(cluster.api, namespace, job_with(name, template, **extra))
    st = wait_phase(cluster.api, namespace, name, "Failed")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert field in failed["message"], failed["message"]
    assert job_pods(cluster.core, namespace, name) == []


def test_deeply_nested_template_leaves_the_operator_serving(
    cluster: Any, namespace: str, operator: Any
) -> None:
    name = unique("deep")
    body = json.dumps(job_with(name, {"affinity": {"nodeAffinity": "DEEP"}}))
    body = body.replace('"DEEP"', '{"a":' * 2000 + "{}" + "}" * 2000)
    url = f"{cluster.api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    # Not strict (kubectl apply --validate=false): the server prunes the unknown nesting.
    response = cluster.api.rest_client.pool_manager.request(
        "POST", f"{url}?fieldValidation=Ignore", body=body.encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert response.status == 201, response.data[:300]
    pods = wait_pods_running(cluster.core, namespace, name, 2)
    assert pods[0].spec.affinity.node_affinity is not None
    assert operator.proc.poll() is None  # still running: nothing crashed the watch
