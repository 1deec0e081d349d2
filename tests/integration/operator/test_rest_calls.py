"""The operator's own HTTP client (kubehttp.py, kubeconfig.py) against the real API
server: bodies arrive as sent, a taken name is a 409, a refused object raises with the
server's message, a merge patch deletes keys set to None, every answer is read so its
connection goes back to the pool, and the client certificate and CA of the kubeconfig
are used (and a server the CA did not sign is refused)."""

from __future__ import annotations

import pytest
from kubernetes import client

from dtjob_operator import kubeconfig
from dtjob_operator.api_client import GuardedApiClient, is_transport_error
from dtjob_operator.k8s import KubeApi
from dtjob_operator.kubehttp import ApiException
from helpers.jobs import JobBuilder, create_job, status


@pytest.fixture
def api(cluster, crd) -> KubeApi:  # type: ignore[no-untyped-def]
    access = kubeconfig.from_kubeconfig([cluster.kubeconfig])
    return KubeApi(GuardedApiClient(access, (5.0, 30.0)))


def _pod(namespace: str, name: str) -> dict:  # type: ignore[type-arg]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"a": "b"}},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1m"}}}],
            "nodeSelector": {"no-such-node": "true"},  # stays Pending: never scheduled
        },
    }


def test_creates_deletes_and_their_errors(
    api: KubeApi, core: client.CoreV1Api, namespace: str
) -> None:
    uid = api.create(_pod(namespace, "p"))
    stored = core.read_namespaced_pod("p", namespace)
    assert uid == stored.metadata.uid  # the reconcile's expectations go by it
    assert stored.metadata.labels == {"a": "b"}
    assert stored.spec.containers[0].resources.requests == {"cpu": "1m"}
    assert api.create(_pod(namespace, "p")) is None  # taken: idempotent, not an error

    bad = _pod(namespace, "q")
    bad["spec"]["containers"][0]["name"] = "Not_A_Name"
    with pytest.raises(ApiException) as err:
        api.create(bad)
    assert err.value.status == 422
    assert "Not_A_Name" in (err.value.body or "")  # the server's own words reach the status

    api.delete_pod(namespace, "p", grace_seconds=0)
    api.delete_pod(namespace, "p")  # gone already: fine
    api.delete_pod(namespace, "never-was")
    with pytest.raises(ValueError):
        api.create({"kind": "Secret", "metadata": {"name": "s", "namespace": namespace}})


def test_status_merge_patch_and_events(cluster, api: KubeApi, namespace: str) -> None:  # type: ignore[no-untyped-def]
    job = create_job(
        cluster.api, namespace, JobBuilder("j").role("worker", 1).spec(suspend=True).build()
    )
    name = job["metadata"]["name"]
    version = api.patch_status(namespace, name, {"reason": "one", "restarts": 2})
    assert version and version != job["metadata"]["resourceVersion"]
    api.patch_status(namespace, name, {"reason": None})  # None deletes the key
    got = status(cluster.api, namespace, name)
    assert "reason" not in got and got["restarts"] == 2

    api.emit_event(job, "Normal", "RestCheck", "an event through the operator's client")
    events = (
        client.CoreV1Api(cluster.api)
        .list_namespaced_event(namespace, field_selector="reason=RestCheck")
        .items
    )
    assert [e.involved_object.uid for e in events] == [job["metadata"]["uid"]]


def test_answers_are_read_so_connections_are_reused(api: KubeApi, namespace: str) -> None:
    """Fifty create/delete rounds on one pool: an unread answer would leave its
    connection checked out, and every call would open a new one."""
    for i in range(50):
        api.create(_pod(namespace, f"r{i}"))
        api.delete_pod(namespace, f"r{i}", grace_seconds=0)
    pool = api.api_client.pool.connection_from_url(api.api_client.server)
    opened = pool.num_connections
    assert opened <= 2, f"{opened} connections opened for 100 sequential calls"


def test_the_shared_tls_context_still_checks_the_server(cluster, api: KubeApi) -> None:  # type: ignore[no-untyped-def]
    """One context for the pool, its files loaded once: the client certificate still
    authenticates (the calls above), and a server the CA did not sign is refused."""
    kw = api.api_client.pool.connection_pool_kw
    assert "ssl_context" in kw and "cert_file" not in kw and "ca_certs" not in kw
    assert api.list_nodes()  # authenticated by the client certificate in the context
    access = kubeconfig.from_kubeconfig([cluster.kubeconfig])
    # The system's CAs, which did not sign the local API server's.
    access.ca_file = access.ca_data = None
    other = GuardedApiClient(access, (5.0, 5.0), retries=0)
    with pytest.raises(Exception) as err:
        KubeApi(other).list_nodes()
    assert is_transport_error(err.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(err.value)
