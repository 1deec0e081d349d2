"""The role pod template on a real kube-apiserver: the embedded core/v1 schema and the CEL
rules refuse a bad template at apply, naming the field, and bound its nesting.

Each refusal the operator can also see is checked against validate_job, its backstop.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes import client

from dtjob_api import GROUP, KIND, PLURAL, VERSION
from dtjob_api.validation import validate_job
from helpers.crd import install_crd

W = "spec.roles.worker.template"
DEPTH = 2000


@pytest.fixture(scope="module")
def jobs(cluster: Any) -> client.CustomObjectsApi:
    install_crd(cluster.api)
    return client.CustomObjectsApi(cluster.api)


def manifest(template: dict[str, Any], name: str = "job", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "strategy": {"type": "DataParallel"},
            "roles": {"worker": {"replicas": 2, "template": template}},
            **spec,
        },
    }


def create(
    jobs: client.CustomObjectsApi, ns: str, body: dict[str, Any], validation: str = "Strict"
) -> dict[str, Any]:
    return jobs.create_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, ns, PLURAL, body, dry_run="All", field_validation=validation
    )


def refusal(call: Any) -> str:
    with pytest.raises(client.ApiException) as err:
        call()
    assert err.value.status in (400, 422), err.value.body
    return str(json.loads(err.value.body)["message"])


def post_raw(api: client.ApiClient, ns: str, raw: str, validation: str) -> tuple[int, str]:
    """POST a job as JSON text: Python's json cannot write 2,000 levels of nesting."""
    url = (
        f"{api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}"
        f"?dryRun=All&fieldValidation={validation}"
    )
    response = api.rest_client.pool_manager.request(
        "POST", url, body=raw.encode(), headers={"Content-Type": "application/json"}
    )
    return response.status, response.data.decode()


def deep_job(where: str) -> str:
    """A job whose template has DEPTH levels of nesting at `where` (a JSON placeholder)."""
    text = json.dumps(manifest({"affinity": {"nodeAffinity": "DEEP"}, "spec": {"affinity": "X"}}))
    nested = '{"a":' * DEPTH + "{}" + "}" * DEPTH
    return text.replace(f'"{where}"', nested).replace('"X"', "{}").replace('"DEEP"', "{}")


@pytest.mark.parametrize("where", ["DEEP", "X"], ids=["short-affinity", "spec-affinity"])
def test_deep_nesting_is_refused_or_pruned(
    cluster: Any, jobs: Any, namespace: str, where: str
) -> None:
    status, body = post_raw(cluster.api, namespace, deep_job(where), "Strict")
    assert status == 400, body[:500]
    assert 'unknown field "spec.roles.worker.template' in json.loads(body)["message"]
    # Without strict field validation (kubectl apply --validate=false), the server prunes
    # what the schema does not know: the stored template is shallow.
    status, body = post_raw(cluster.api, namespace, deep_job(where), "Ignore")
    assert status == 201, body[:500]
    stored = json.loads(body)["spec"]["roles"]["worker"]["template"]
    assert stored == {"affinity": {"nodeAffinity": {}}, "spec": {"affinity": {}}}


TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
# (id, template, extra spec, field the server names, words of its message)
BAD: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    ("toleration-operator-typo", {"tolerations": [{**TOLERATION, "operator": "Equalz"}]}, {},
     f"{W}.tolerations[0].operator", 'Unsupported value: "Equalz"'),
    ("toleration-in-spec-typo",
     {"spec": {"tolerations": [{**TOLERATION, "effect": "NoScheduel"}]}}, {},
     f"{W}.spec.tolerations[0].effect", 'Unsupported value: "NoScheduel"'),
    ("affinity-typo", {"affinity": {"nodeAfinity": {}}}, {},
     f"{W}.affinity.nodeAfinity", "unknown field"),
    ("pod-spec-typo", {"spec": {"imagePullSecret": [{"name": "x"}]}}, {},
     f"{W}.spec.imagePullSecret", "unknown field"),
    ("container-without-name", {"spec": {"containers": [{"image": "x"}]}}, {},
     f"{W}.spec.containers[0].name", "Required value"),
    ("duplicate-container", {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}, {},
     f"{W}.spec.containers[1]", "Duplicate value"),
    ("int-as-string-field", {"spec": {"terminationGracePeriodSeconds": "soon"}}, {},
     f"{W}.spec.terminationGracePeriodSeconds", "must be of type integer"),
    ("restart-policy", {"spec": {"restartPolicy": "OnFailure"}}, {},
     f"{W}.spec.restartPolicy", "must be Never"),
    ("hostname", {"spec": {"hostname": "h"}}, {},
     f"{W}.spec", "hostname and spec.subdomain are the operator's"),
    ("node-name", {"spec": {"nodeName": "gpu-7"}}, {},
     f"{W}.spec", "spec.nodeName the scheduler's"),
    ("reserved-label", {"metadata": {"labels": {"dtjob.io/role": "ps"}}}, {},
     W, "labels and metadata.labels: dtjob.io/* keys are reserved"),
    ("reserved-annotation", {"annotations": {"dtjob.io/rank": "0"}}, {},
     W, "annotations and metadata.annotations: dtjob.io/* keys are reserved"),
    ("checkpoint-on-dev-shm", {}, {"checkpoint": {"mountPath": "/dev/shm"}},
     "spec.checkpoint.mountPath", "may not be /dev/shm"),
    ("checkpoint-claim-name", {}, {"checkpoint": {"claimName": "My_Claim"}},
     "spec.checkpoint.claimName", "should match"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "extra", "field", "words"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])  # fmt: skip
def test_bad_template_is_refused_at_apply(
    jobs: Any, namespace: str, template: dict[str, Any], extra: dict[str, Any], field: str,
    words: str,
) -> None:  # fmt: skip
    body = manifest(template, **extra)
    message = refusal(lambda: create(jobs, namespace, body))
    assert field in message, message
    assert words in message, message


@pytest.mark.parametrize(("template", "extra", "field", "words"), [b[1:] for b in BAD[7:]],
                         ids=[b[0] for b in BAD[7:]])  # fmt: skip
def test_the_operator_backstop_blames_the_same_field(
    template: dict[str, Any], extra: dict[str, Any], field: str, words: str
) -> None:
    found = {e.field for e in validate_job(manifest(template, **extra)["spec"])}
    assert any(f.startswith(field) for f in found), found


def test_a_full_template_is_stored_as_written(jobs: Any, namespace: str) -> None:
    template = {
        "metadata": {"labels": {"team": "nlp"}, "annotations": {"note": "x"}},
        "spec": {
            "serviceAccountName": "sa",
            "imagePullSecrets": [{"name": "registry"}],
            "initContainers": [{"name": "sidecar", "image": "b", "restartPolicy": "Always"}],
            "containers": [
                {
                    "name": "trainer",
                    "envFrom": [{"configMapRef": {"name": "c"}}],
                    "ports": [{"containerPort": 6006}],
                    "readinessProbe": {"tcpSocket": {"port": 6006}},
                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "dnsConfig": {"options": [{"name": "ndots", "value": "1"}]},
        },
        "tolerations": [TOLERATION],
    }
    stored = create(jobs, namespace, manifest(copy.deepcopy(template)))
    expected = copy.deepcopy(template)
    # The one default the schema keeps: a map-list key (containerPort + protocol).
    expected["spec"]["containers"][0]["ports"][0]["protocol"] = "TCP"
    assert stored["spec"]["roles"]["worker"]["template"] == expected
