"""The Helm chart on a real API server: `helm install` succeeds, NOTES tell the next command,
and the operator's ServiceAccount may do exactly what the operator does. The decisive case
is RBAC escalation: the operator creates a Role granting trainer pods get/patch on their
progress ConfigMap, which the API server allows only because the operator holds those
permissions itself; a Role granting more (secrets) must be refused."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dtjob-operator"


def helm() -> str:
    build = subprocess.run(
        [str(REPO / "hack" / "build-binaries.sh"), "helm"], capture_output=True, text=True
    )
    assert build.returncode == 0, f"building helm failed: {build.stderr}"
    return str(Path(build.stdout.strip().splitlines()[-1]) / "helm")


def run_helm(kubeconfig: Path, *args: str) -> str:
    result = subprocess.run(
        [helm(), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True
    )
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def release(cluster: Any) -> Iterator[tuple[str, str, str]]:
    """The chart installed (without the CRD: the API tests own it) in a fresh namespace;
    yields (release, namespace, install output)."""
    name = f"rbac-{uuid.uuid4().hex[:6]}"
    namespace = f"{name}-system"
    out = run_helm(
        cluster.kubeconfig,
        "install", name, str(CHART),
        "--namespace", namespace, "--create-namespace", "--set", "crds.install=false",
    )  # fmt: skip
    try:
        yield name, namespace, out
    finally:
        run_helm(cluster.kubeconfig, "uninstall", name, "--namespace", namespace)
        client.CoreV1Api(cluster.api).delete_namespace(namespace)


@pytest.fixture(scope="module")
def as_operator(cluster: Any, release: tuple[str, str, str]) -> client.ApiClient:
    """An API client that impersonates the operator's ServiceAccount."""
    name, namespace, _ = release
    api = config.new_client_from_config(str(cluster.kubeconfig))
    api.set_default_header(
        "Impersonate-User", f"system:serviceaccount:{namespace}:{name}-dtjob-operator"
    )
    return api


def test_install_prints_the_next_commands(release: tuple[str, str, str]) -> None:
    name, namespace, out = release
    assert "STATUS: deployed" in out
    assert f"kubectl -n {namespace} rollout status deployment/{name}-dtjob-operator" in out
    assert "kubectl apply -f examples/cpu/data-parallel.yaml" in out
    assert "kubectl get dtj -w" in out


def allowed(api: client.ApiClient, verb: str, resource: str, group: str = "", **kw: str) -> bool:
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"verb": verb, "resource": resource, "group": group, **kw}}}
    )
    return bool(review.status.allowed)


@pytest.mark.parametrize(
    ("verb", "resource", "group", "expected"),
    [
        ("watch", "distributedtrainingjobs", "dtjob.io", True),
        ("patch", "distributedtrainingjobs", "dtjob.io", False),  # only its status
        ("update", "leases", "coordination.k8s.io", False),  # only in its own namespace
        ("delete", "distributedtrainingjobs", "dtjob.io", True),
        ("create", "distributedtrainingjobs", "dtjob.io", False),
        ("create", "pods", "", True),
        ("delete", "pods", "", True),
        ("create", "services", "", True),
        ("create", "serviceaccounts", "", True),
        ("patch", "configmaps", "", True),
        ("create", "rolebindings", "rbac.authorization.k8s.io", True),
        ("create", "events", "", True),
        ("list", "nodes", "", True),
        ("list", "resourcequotas", "", True),
        ("list", "priorityclasses", "scheduling.k8s.io", True),
        ("get", "persistentvolumeclaims", "", True),
        ("create", "persistentvolumeclaims", "", False),
        ("delete", "persistentvolumeclaims", "", False),
        ("get", "secrets", "", False),
        ("create", "deployments", "apps", False),
        ("delete", "nodes", "", False),
        ("create", "clusterroles", "rbac.authorization.k8s.io", False),
    ],
)
def test_operator_may_do_what_it_needs_and_no_more(
    as_operator: client.ApiClient, verb: str, resource: str, group: str, expected: bool
) -> None:
    assert allowed(as_operator, verb, resource, group, namespace="default") is expected


def test_leader_election_lease_only_in_the_release_namespace(
    as_operator: client.ApiClient, release: tuple[str, str, str]
) -> None:
    _, namespace, _ = release
    assert allowed(as_operator, "update", "leases", "coordination.k8s.io", namespace=namespace)
    assert not allowed(as_operator, "update", "leases", "coordination.k8s.io",
                       namespace="kube-node-lease")  # fmt: skip


def test_status_subresource_is_writable(as_operator: client.ApiClient) -> None:
    assert allowed(
        as_operator, "patch", "distributedtrainingjobs", "dtjob.io", subresource="status"
    )


@pytest.fixture
def job_namespace(cluster: Any) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(cluster.api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def progress_role(name: str, resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": [""],
                "resources": resources,
                "resourceNames": [f"{name}-progress"],
                "verbs": verbs,
            }
        ],
    }


def test_operator_can_grant_trainer_pods_their_progress_configmap(
    as_operator: client.ApiClient, job_namespace: str
) -> None:
    rbac = client.RbacAuthorizationV1Api(as_operator)
    rbac.create_namespaced_role(
        job_namespace, progress_role("job", ["configmaps"], ["get", "patch"])
    )
    rbac.create_namespaced_role_binding(
        job_namespace,
        {
            "metadata": {"name": "job-trainer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "job"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "job-trainer", "namespace": job_namespace}
            ],
        },
    )


def test_operator_cannot_grant_what_it_does_not_hold(
    as_operator: client.ApiClient, job_namespace: str
) -> None:
    rbac = client.RbacAuthorizationV1Api(as_operator)
    with pytest.raises(client.ApiException) as err:
        rbac.create_namespaced_role(job_namespace, progress_role("job", ["secrets"], ["get"]))
    assert err.value.status == 403
    assert "attempting to grant RBAC permissions not currently held" in str(err.value.body)
