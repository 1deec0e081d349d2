"""With DTJOB_NETWORK_POLICY=true every job gets a NetworkPolicy, owned by the job, that
admits traffic to its pods only from its own pods. The local control plane has no network
plugin enforcing NetworkPolicy: this proves the object is built, allowed and created, not
that packets are dropped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from helpers.jobs import JobBuilder, create_job, get_job, wait_phase
from helpers.kube import unique, wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def operator(cluster, crd, tmp_path_factory) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {"DTJOB_TRAINER_IMAGE": "dtjob/trainer:test", "DTJOB_NETWORK_POLICY": "true"}
    proc = OperatorProcess(cluster.kubeconfig, log, env)
    proc.start()
    yield proc
    proc.stop()


@pytest.mark.usefixtures("operator")
def test_each_job_gets_a_policy_admitting_only_its_own_pods(cluster, namespace) -> None:  # type: ignore[no-untyped-def]
    name = unique("np")
    create_job(cluster.api, namespace, JobBuilder(name).role("worker", 2, gpus=1).build())
    wait_phase(cluster.api, namespace, name, "Running", timeout=60)
    net = client.NetworkingV1Api(cluster.api)
    policy = wait_for(
        lambda: next(iter(net.list_namespaced_network_policy(namespace).items), None),
        30,
        what="the job's NetworkPolicy",
    )
    own = {"dtjob.io/job-name": name}
    assert policy.metadata.name == f"{name}-peers"
    assert policy.spec.pod_selector.match_labels == own
    assert policy.spec.policy_types == ["Ingress"]
    (rule,) = policy.spec.ingress
    assert [peer.pod_selector.match_labels for peer in rule.var_from] == [own]
    job = get_job(cluster.api, namespace, name)
    assert job is not None
    assert policy.metadata.owner_references[0].uid == job["metadata"]["uid"]
