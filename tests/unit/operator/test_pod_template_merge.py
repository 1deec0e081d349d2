"""build_pod merges the operator's contract into the role's pod template: golden merges of
template + contract, what the user sets is kept, what the contract needs wins."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from unit.operator.builders import a_job

from dtjob_operator.builders import build_pod, build_rbac
from dtjob_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(trainer_image="reg/trainer:1")
CONTRACT_MOUNTS = [
    {"name": "config", "mountPath": "/etc/dtjob", "readOnly": True},
    {"name": "dshm", "mountPath": "/dev/shm"},
    {"name": "checkpoints", "mountPath": "/checkpoints"},
]
SIDECAR = {"name": "log-shipper", "image": "busybox", "restartPolicy": "Always"}
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "nlp"}, "annotations": {"note": "x"}},
    "spec": {
        "serviceAccountName": "trainer-sa",
        "imagePullSecrets": [{"name": "registry"}],
        "initContainers": [{"name": "fetch", "image": "busybox"}, SIDECAR],
        "containers": [
            {"name": "exporter", "image": "exp:1"},
            {
                "name": "trainer",
                "image": "me/train:2",
                "command": ["torchrun", "train.py"],
                "envFrom": [{"configMapRef": {"name": "hparams"}}],
                "env": [{"name": "HF_HOME", "value": "/data/hf"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "ports": [{"name": "tb", "containerPort": 6006}],
                "readinessProbe": {"tcpSocket": {"port": 29500}},
                "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
            },
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "securityContext": {"runAsUser": 2000, "fsGroup": 2000},
        "dnsConfig": {"options": [{"name": "ndots", "value": "1"}]},
        "terminationGracePeriodSeconds": 120,
    },
    "tolerations": [{"key": "gpu", "operator": "Exists"}],
    "env": [{"name": "EXTRA", "value": "1"}],
}


def pod_of(template: dict[str, Any], **trainer: Any) -> dict[str, Any]:
    job = a_job().with_workers(2, gpus=1, cpu="4", memory="8Gi").with_template("worker", **template)
    if trainer:
        job = job.with_trainer(**trainer)
    return build_pod(job.job(), "worker", 1, 0, SETTINGS)


def test_golden_merge_keeps_the_users_pod_and_adds_the_contract() -> None:
    template = copy.deepcopy(TEMPLATE)
    pod = pod_of(template)
    assert template == TEMPLATE, "the job's template is not modified"
    spec = pod["spec"]
    exporter, trainer = spec["containers"]
    assert exporter == {"name": "exporter", "image": "exp:1"}  # position and content kept
    assert spec["initContainers"] == [{"name": "fetch", "image": "busybox"}, SIDECAR]
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["serviceAccountName"] == "trainer-sa"
    assert spec["dnsConfig"] == {"options": [{"name": "ndots", "value": "1"}]}
    assert spec["terminationGracePeriodSeconds"] == 120
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    # The contract
    assert spec["hostname"] == "j-worker-1" and spec["subdomain"] == "j"
    assert spec["restartPolicy"] == "Never" and spec["enableServiceLinks"] is False
    assert [v["name"] for v in spec["volumes"]] == ["config", "dshm", "checkpoints", "data"]
    assert trainer["image"] == "me/train:2" and trainer["command"] == ["torchrun", "train.py"]
    assert trainer["envFrom"] == [{"configMapRef": {"name": "hparams"}}]
    assert trainer["readinessProbe"] == {"tcpSocket": {"port": 29500}}
    names = [e["name"] for e in trainer["env"]]
    assert names[:2] == ["MASTER_ADDR", "MASTER_PORT"] and names[-2:] == ["HF_HOME", "EXTRA"]
    assert trainer["ports"] == [
        {"name": "rendezvous", "containerPort": 29500},
        {"name": "tb", "containerPort": 6006},
    ]
    assert trainer["volumeMounts"] == [*CONTRACT_MOUNTS, {"name": "data", "mountPath": "/data"}]
    assert trainer["resources"]["limits"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    # Restricted defaults only where the user set nothing.
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 2000,
        "runAsGroup": 1000,
        "fsGroup": 2000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert trainer["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["IPC_LOCK"]},
    }
    assert pod["metadata"]["labels"]["team"] == "nlp"
    assert pod["metadata"]["labels"]["dtjob.io/role-index"] == "1"
    assert pod["metadata"]["annotations"]["note"] == "x"


def test_without_a_trainer_container_one_is_added_first() -> None:
    pod = pod_of({"spec": {"containers": [{"name": "exporter", "image": "exp:1"}]}})
    trainer, exporter = pod["spec"]["containers"]
    assert trainer["name"] == "trainer" and trainer["image"] == "reg/trainer:1"
    assert trainer["command"] == ["python", "-m", "dtjob_trainer", "run"]
    assert trainer["volumeMounts"] == CONTRACT_MOUNTS
    assert exporter["name"] == "exporter"
    assert pod["spec"]["serviceAccountName"] == "j-trainer"


def test_image_and_command_from_spec_trainer_when_the_container_has_none() -> None:
    pod = pod_of(
        {"spec": {"containers": [{"name": "trainer", "workingDir": "/w"}]}},
        image="me/custom:1",
        command=["run.sh"],
        args=["--x"],
    )
    trainer = pod["spec"]["containers"][0]
    assert trainer["image"] == "me/custom:1" and trainer["workingDir"] == "/w"
    assert trainer["command"] == ["run.sh"] and trainer["args"] == ["--x"]


def test_the_containers_own_command_drops_spec_trainer_args() -> None:
    pod = pod_of({"spec": {"containers": [{"name": "trainer", "command": ["a"]}]}}, args=["--x"])
    assert "args" not in pod["spec"]["containers"][0]


def test_short_fields_fold_into_the_pod_spec() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    pod = pod_of(
        {
            "nodeSelector": {"gpu": "h100"},
            "affinity": affinity,
            "schedulerName": "volcano",
            "runtimeClassName": "nvidia",
            "priorityClassName": "high",
            "volumes": [{"name": "d", "emptyDir": {}}],
            "volumeMounts": [{"name": "d", "mountPath": "/d"}],
            "labels": {"a": "b"},
        }
    )
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"gpu": "h100"} and spec["affinity"] == affinity
    assert spec["schedulerName"] == "volcano" and spec["runtimeClassName"] == "nvidia"
    assert spec["priorityClassName"] == "high"
    assert spec["volumes"][-1] == {"name": "d", "emptyDir": {}}
    assert spec["containers"][0]["volumeMounts"][-1] == {"name": "d", "mountPath": "/d"}
    assert pod["metadata"]["labels"]["a"] == "b"


def test_user_security_context_without_the_defaults() -> None:
    job = (
        a_job().with_workers(1).with_template("worker", spec={"securityContext": {"runAsUser": 5}})
    )
    settings = OperatorSettings(pod_security_defaults=False)
    pod = build_pod(job.job(), "worker", 0, 0, settings)
    assert pod["spec"]["securityContext"] == {"runAsUser": 5}
    assert "securityContext" not in pod["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("user", "expected"),
    [({"capabilities": {"add": ["IPC_LOCK"]}},
      {"allowPrivilegeEscalation": False, "capabilities": {"add": ["IPC_LOCK"]}}),
     # Kubernetes refuses privileged with allowPrivilegeEscalation false: no such default.
     ({"privileged": True}, {"privileged": True, "capabilities": {"drop": ["ALL"]}})],
)  # fmt: skip
def test_the_users_container_context_keeps_its_own_fields(
    user: dict[str, Any], expected: dict[str, Any]
) -> None:
    template = {"spec": {"containers": [{"name": "trainer", "securityContext": user}]}}
    job = a_job().with_workers(1).with_template("worker", **template)
    pod = build_pod(job.job(), "worker", 0, 0, SETTINGS)
    assert pod["spec"]["containers"][0]["securityContext"] == expected


def test_rbac_binds_the_users_service_accounts_too() -> None:
    job = (
        a_job()
        .with_strategy("ParameterServer")
        .with_workers(1)
        .with_ps(1)
        .with_template("worker", spec={"serviceAccountName": "trainer-sa"})
        .with_template("ps", spec={"serviceAccountName": "trainer-sa"})
    )
    binding = build_rbac(job.job())[2]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "j-trainer", "namespace": "ns"},
        {"kind": "ServiceAccount", "name": "trainer-sa", "namespace": "ns"},
    ]
