"""The pod template rules (api/template_rules.py): every refusal names the field a user has
to change, and a template that follows the contract passes."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_api.guard_rails import GuardRails
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.template_rules import CONTRACT_ENV
from dtjob_api.validation import validate_job
from dtjob_operator.envcontract import build_env

W = "spec.roles.worker.template"


def job(template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "strategy": {"type": "DataParallel"},
        "roles": {"worker": {"replicas": 2, "template": template}},
        **spec,
    }


def trainer(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "trainer", **fields}]}}


def mounted(*paths: str) -> dict[str, Any]:
    """A template with volume v mounted at each path in the trainer container."""
    return {
        "volumes": [{"name": "v", "emptyDir": {}}],
        "volumeMounts": [{"name": "v", "mountPath": p} for p in paths],
    }


def errors(spec: dict[str, Any], allow_host_path: bool = False) -> dict[str, str]:
    rails = GuardRails(allow_host_path=allow_host_path)
    return {e.field: e.message for e in validate_job(spec, rails=rails)}


GOOD = {
    "metadata": {"labels": {"team": "nlp", "example.com/tier": "a"}, "annotations": {"a": "b"}},
    "spec": {
        "serviceAccountName": "trainer-sa",
        "imagePullSecrets": [{"name": "registry"}],
        "initContainers": [
            {
                "name": "fetch",
                "image": "busybox",
                "volumeMounts": [{"name": "data", "mountPath": "/d"}],
            },
            {"name": "log-shipper", "image": "busybox", "restartPolicy": "Always"},
        ],
        "containers": [
            {
                "name": "trainer",
                "image": "me/train:1",
                "envFrom": [{"configMapRef": {"name": "hparams"}}],
                "env": [{"name": "HF_HOME", "value": "/data/hf"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "ports": [{"name": "tb", "containerPort": 6006}],
            },
            {
                "name": "exporter",
                "image": "exp:1",
                "volumeMounts": [{"name": "checkpoints", "mountPath": "/c"}],
            },
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "restartPolicy": "Never",
        "securityContext": {"runAsUser": 2000},
    },
    "tolerations": [{"key": "gpu", "operator": "Exists"}],
}


def test_a_template_that_follows_the_contract_passes() -> None:
    assert errors(job(GOOD)) == {}


CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    # (id, template, extra spec fields, field, words of the message)
    (
        "reserved env",
        trainer(env=[{"name": "A", "value": "1"}, {"name": "RANK", "value": "0"}]),
        {},
        f"{W}.spec.containers[0].env[1].name",
        "RANK is set by the operator",
    ),
    (
        "reserved env, short field",
        {"env": [{"name": "NCCL_SOCKET_IFNAME", "value": "ib0"}]},
        {},
        f"{W}.env[0].name",
        "set spec.network.ncclSocketIfname instead",
    ),
    (
        "our volume name",
        {"volumes": [{"name": "dshm", "emptyDir": {}}]},
        {},
        f"{W}.volumes[0].name",
        "one of the operator's volumes",
    ),
    (
        "volume without a source",
        {"spec": {"volumes": [{"name": "v"}]}},
        {},
        f"{W}.spec.volumes[0]",
        "exactly one source",
    ),
    (
        "volume with two sources",
        {"volumes": [{"name": "v", "emptyDir": {}, "configMap": {"name": "c"}}]},
        {},
        f"{W}.volumes[0]",
        "configMap and emptyDir",
    ),
    (
        "duplicate volume",
        {
            "spec": {"volumes": [{"name": "v", "emptyDir": {}}]},
            "volumes": [{"name": "v", "emptyDir": {}}],
        },
        {},
        f"{W}.volumes[0].name",
        "already defined",
    ),
    (
        "volume name not a DNS label",
        {"volumes": [{"name": "My_Vol", "emptyDir": {}}]},
        {},
        f"{W}.volumes[0].name",
        "DNS label",
    ),
    (
        "mount of an unknown volume",
        trainer(volumeMounts=[{"name": "nope", "mountPath": "/x"}]),
        {},
        f"{W}.spec.containers[0].volumeMounts[0].name",
        "no volume named 'nope'",
    ),
    (
        "sidecar mount of an unknown volume",
        {
            "spec": {
                "initContainers": [
                    {"name": "s", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}
                ]
            }
        },
        {},
        f"{W}.spec.initContainers[0].volumeMounts[0].name",
        "no volume named 'nope'",
    ),
    (
        "mount over the config dir",
        mounted("/etc/dtjob"),
        {},
        f"{W}.volumeMounts[0].mountPath",
        "/etc/dtjob",
    ),
    (
        "mount inside /dev/shm",
        mounted("/dev/shm/x"),
        {},
        f"{W}.volumeMounts[0].mountPath",
        "/dev/shm",
    ),
    (
        "mount at the checkpoint dir",
        mounted("/ckpt/"),
        {"checkpoint": {"mountPath": "/ckpt"}},
        f"{W}.volumeMounts[0].mountPath",
        "spec.checkpoint.mountPath",
    ),
    # The kubelet resolves '//', '.' and '..': a crooked spelling lands on the same place.
    (
        "mount over /dev/shm spelled with //",
        mounted("/dev//shm"),
        {},
        f"{W}.volumeMounts[0].mountPath",
        "/dev/shm",
    ),
    (
        "mount over the config dir spelled with ..",
        mounted("/tmp/../etc/dtjob/"),
        {},
        f"{W}.volumeMounts[0].mountPath",
        "/etc/dtjob",
    ),
    (
        "mount at the checkpoint dir spelled with .",
        mounted("/./ckpt"),
        {"checkpoint": {"mountPath": "/ckpt"}},
        f"{W}.volumeMounts[0].mountPath",
        "spec.checkpoint.mountPath",
    ),
    (
        "two mounts at one path, spelled two ways",
        mounted("/a", "//a/"),
        {},
        f"{W}.volumeMounts[1].mountPath",
        "already mounted",
    ),
    (
        "nodeName",
        {"spec": {"nodeName": "gpu-7"}},
        {},
        f"{W}.spec.nodeName",
        "without the scheduler",
    ),
    (
        "two mounts at one path",
        mounted("/a", "/a"),
        {},
        f"{W}.volumeMounts[1].mountPath",
        "already mounted",
    ),
    (
        "dtjob.io label",
        {"metadata": {"labels": {"dtjob.io/role": "ps"}}},
        {},
        f"{W}.metadata.labels[dtjob.io/role]",
        "reserved",
    ),
    (
        "managed-by label",
        {"labels": {"app.kubernetes.io/managed-by": "me"}},
        {},
        f"{W}.labels[app.kubernetes.io/managed-by]",
        "reserved",
    ),
    (
        "dtjob.io annotation",
        {"annotations": {"dtjob.io/rank": "3"}},
        {},
        f"{W}.annotations[dtjob.io/rank]",
        "reserved",
    ),
    (
        "label value",
        {"labels": {"team": "a b"}},
        {},
        f"{W}.labels[team]",
        "not a valid label value",
    ),
    ("label value too long", {"labels": {"team": "a" * 64}}, {}, f"{W}.labels[team]", "at most 63"),
    ("label key", {"labels": {"-bad": "x"}}, {}, f"{W}.labels[-bad]", "not a valid label key"),
    (
        "label key prefix",
        {"labels": {"Example.com/x": "x"}},
        {},
        f"{W}.labels[Example.com/x]",
        "DNS subdomain",
    ),
    (
        "annotations over 256 KiB",
        {"metadata": {"annotations": {"a": "x" * 200_000}}, "annotations": {"b": "y" * 70_000}},
        {},
        f"{W}.annotations",
        "256 KiB",
    ),
    (
        "label in both places",
        {"metadata": {"labels": {"t": "1"}}, "labels": {"t": "2"}},
        {},
        f"{W}.labels[t]",
        "set it in one place",
    ),
    (
        "value in both places",
        {"spec": {"nodeSelector": {"a": "b"}}, "nodeSelector": {"c": "d"}},
        {},
        f"{W}.nodeSelector",
        "set it in one place",
    ),
    (
        "restartPolicy",
        {"spec": {"restartPolicy": "OnFailure"}},
        {},
        f"{W}.spec.restartPolicy",
        "must be Never",
    ),
    ("hostname", {"spec": {"hostname": "x"}}, {}, f"{W}.spec.hostname", "set by the operator"),
    ("subdomain", {"spec": {"subdomain": "x"}}, {}, f"{W}.spec.subdomain", "set by the operator"),
    (
        "trainer resources",
        trainer(resources={"limits": {"cpu": "1"}}),
        {},
        f"{W}.spec.containers[0].resources",
        "come from the role",
    ),
    (
        "rendezvous port",
        trainer(ports=[{"containerPort": 29500}]),
        {},
        f"{W}.spec.containers[0].ports[0]",
        "rendezvous port",
    ),
    (
        "init container named trainer",
        {"spec": {"initContainers": [{"name": "trainer"}]}},
        {},
        f"{W}.spec.initContainers[0].name",
        "training container",
    ),
    (
        "duplicate container names",
        {"spec": {"initContainers": [{"name": "x"}], "containers": [{"name": "x"}]}},
        {},
        f"{W}.spec.containers[0].name",
        "already exists",
    ),
    (
        "hostPath",
        {"volumes": [{"name": "h", "hostPath": {"path": "/var"}}]},
        {},
        f"{W}.volumes[0].hostPath",
        "allowHostPath",
    ),
    (
        "checkpoint on /dev/shm",
        {},
        {"checkpoint": {"mountPath": "/dev/shm"}},
        "spec.checkpoint.mountPath",
        "inside /dev/shm",
    ),
    (
        "checkpoint in the config dir",
        {},
        {"checkpoint": {"mountPath": "/etc/dtjob/ckpt"}},
        "spec.checkpoint.mountPath",
        "inside /etc/dtjob",
    ),
    (
        "checkpoint claim name",
        {},
        {"checkpoint": {"claimName": "My_Claim"}},
        "spec.checkpoint.claimName",
        "DNS-1123 subdomain",
    ),
]


@pytest.mark.parametrize(
    ("template", "extra", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_refused_with_the_field_named(
    template: dict[str, Any], extra: dict[str, Any], field: str, words: str
) -> None:
    found = errors(job(template, **extra))
    assert field in found, found
    assert words in found[field]


def test_host_path_when_the_operator_allows_it() -> None:
    spec = job({"volumes": [{"name": "h", "hostPath": {"path": "/var"}}]})
    assert errors(spec, allow_host_path=True) == {}


def test_contract_env_names_cover_every_variable_the_operator_sets() -> None:
    strategies = {
        "DataParallel": {"worker": {"replicas": 2}},
        "ParameterServer": {"worker": {"replicas": 2}, "ps": {"replicas": 1}},
        "Hybrid": {"stage": {"replicas": 4}},
    }
    for strategy, roles in strategies.items():
        spec = DistributedTrainingJobSpec.model_validate(
            {"strategy": {"type": strategy}, "roles": roles}
        )
        for role in roles:
            names = {v["name"] for v in build_env("j", "ns", spec, role, 0, 0)}
            assert names <= CONTRACT_ENV.keys(), names - CONTRACT_ENV.keys()
