"""The pure builders: golden manifests and every rule they apply."""

from __future__ import annotations

import json
from typing import Any

import pytest
from unit.operator.builders import a_job

from dtjob_operator.builders import (
    build_children,
    build_config_map,
    build_history_config_map,
    build_pod,
    build_progress_config_map,
    build_rbac,
    build_service,
    child_key,
)
from dtjob_operator.builders.pod import omp_threads
from dtjob_operator.settings import OperatorSettings

SETTINGS = OperatorSettings()
OWNER = {
    "apiVersion": "dtjob.io/v1alpha1",
    "kind": "DistributedTrainingJob",
    "name": "j",
    "uid": "uid-j",
    "controller": True,
    "blockOwnerDeletion": True,
}
JOB_LABELS = {"dtjob.io/job-name": "j", "app.kubernetes.io/managed-by": "dtjob-operator"}


def meta(name: str, **labels: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ns",
        "labels": {**JOB_LABELS, **labels},
        "ownerReferences": [OWNER],
    }


def env_dict(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_service_is_headless_and_publishes_not_ready_pods() -> None:
    svc = build_service(a_job().with_workers(2).with_network(masterPort=23456).job())
    assert svc == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta("j"),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"dtjob.io/job-name": "j"},
            "ports": [
                {"name": "rendezvous", "port": 23456, "targetPort": 23456, "protocol": "TCP"}
            ],
        },
    }


def test_config_map_holds_the_defaulted_spec_as_camel_case_json() -> None:
    cm = build_config_map(a_job().with_workers(2, gpus=1).job())
    assert cm["metadata"] == meta("j-config")
    config = json.loads(cm["data"]["config.json"])
    assert config["roles"] == {
        "worker": {"replicas": 2, "gpus": 1, "gpuResource": "nvidia.com/gpu"}
    }
    assert config["runPolicy"]["backoffLimit"] == 3  # a default, filled in
    assert config["network"]["masterPort"] == 29500
    assert "claimName" not in config["checkpoint"]  # unset optionals left out
    assert config["trainer"]["batchSize"] == 64


def test_progress_config_map_starts_empty() -> None:
    cm = build_progress_config_map(a_job().with_workers(1).job())
    assert cm == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("j-progress"),
        "data": {"progress.json": "{}"},
    }


def test_history_config_map_starts_with_no_rows_in_the_readers_format() -> None:
    cm = build_history_config_map(a_job().with_workers(1).job())
    assert cm["metadata"] == meta("j-history")  # labels and owner as every child: GC'd
    assert list(cm["data"]) == ["history.json"]
    # Byte for byte what the SDK and `kubectl dtj plot` are written against.
    assert cm["data"]["history.json"] == (
        '{"columns": ["step", "loss", "accuracy", "samplesPerSecond", "lr", "time"], '
        '"rows": [], "stride": 1}'
    )


def test_rbac_allows_only_get_and_patch_of_the_own_progress_and_history() -> None:
    sa, role, binding = build_rbac(a_job().with_workers(1).job())
    assert sa == {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("j-trainer")}
    assert role["kind"] == "Role" and role["metadata"] == meta("j-progress")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["j-progress", "j-history"],
            "verbs": ["get", "patch"],
        }
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "j-progress",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "j-trainer", "namespace": "ns"}
    ]


def test_golden_worker_pod() -> None:
    job = a_job().with_workers(2, gpus=2, cpu="8", memory="32Gi").job()
    pod = build_pod(job, "worker", 1, 3, SETTINGS)
    env = pod["spec"]["containers"][0].pop("env")
    assert [e["name"] for e in env][:4] == ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"]
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **meta(
                "j-worker-1",
                **{
                    "dtjob.io/role": "worker",
                    "dtjob.io/role-index": "1",
                    "dtjob.io/generation": "3",
                },
            ),
            "annotations": {"dtjob.io/rank": "2", "dtjob.io/world-size": "4"},
        },
        "spec": {
            "hostname": "j-worker-1",
            "subdomain": "j",
            "restartPolicy": "Never",
            "serviceAccountName": "j-trainer",
            "terminationGracePeriodSeconds": 60,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "fsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "trainer",
                    "image": "dtjob/trainer:0.1.0",
                    "command": ["python", "-m", "dtjob_trainer", "run"],
                    "ports": [{"name": "rendezvous", "containerPort": 29500}],
                    "resources": {
                        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
                        "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
                    },
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/dtjob", "readOnly": True},
                        {"name": "dshm", "mountPath": "/dev/shm"},
                        {"name": "checkpoints", "mountPath": "/checkpoints"},
                    ],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
            "volumes": [
                {
                    "name": "config",
                    "configMap": {
                        "name": "j-config",
                        "items": [{"key": "config.json", "path": "config.json"}],
                    },
                },
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
                {"name": "checkpoints", "emptyDir": {}},
            ],
        },
    }
    assert {e["name"]: e["value"] for e in env}["RANK"] == "2"


def test_cpu_only_pod_requests_no_gpu_and_no_empty_resources() -> None:
    pod = build_pod(a_job().with_workers(1).job(), "worker", 0, 0, SETTINGS)
    assert "resources" not in pod["spec"]["containers"][0]
    pod = build_pod(a_job().with_workers(1, memory="1Gi").job(), "worker", 0, 0, SETTINGS)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"memory": "1Gi"}


SHM = [
    ("no gpu -> 1Gi floor", 0, None, "1Gi", "1Gi"),
    ("1 gpu", 1, None, "1Gi", "1Gi"),
    ("8 gpus x 1Gi", 8, None, "1Gi", "8Gi"),
    ("4 gpus x 512Mi", 4, None, "512Mi", "2Gi"),
    ("3 gpus x 512Mi", 3, None, "512Mi", "1536Mi"),
    ("spec wins", 8, "64Gi", "1Gi", "64Gi"),
]


@pytest.mark.parametrize(
    ("gpus", "spec_size", "per_gpu", "expected"), [s[1:] for s in SHM], ids=[s[0] for s in SHM]
)
def test_shm_size(gpus: int, spec_size: str | None, per_gpu: str, expected: str) -> None:
    job = a_job().with_workers(1, gpus=gpus)
    if spec_size:
        job = job.with_network(shmSize=spec_size)
    pod = build_pod(job.job(), "worker", 0, 0, OperatorSettings(default_shm_per_gpu=per_gpu))
    dshm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": expected}


def test_checkpoint_claim_is_mounted_at_the_checkpoint_dir() -> None:
    job = a_job().with_workers(1).with_checkpoint(claimName="ckpt", mountPath="/data/ckpt")
    pod = build_pod(job.job(), "worker", 0, 0, SETTINGS)
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod["spec"][
        "volumes"
    ]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "checkpoints", "mountPath": "/data/ckpt"} in mounts
    assert env_dict(pod)["DTJ_CHECKPOINT_DIR"] == "/data/ckpt"


def test_custom_image_command_and_args() -> None:
    job = (
        a_job()
        .with_workers(1)
        .with_trainer(
            image="me/train:1",
            command=["torchrun", "train.py"],
            args=["--lr", "0.1"],
            imagePullPolicy="IfNotPresent",
        )
    )
    container = build_pod(job.job(), "worker", 0, 0, SETTINGS)["spec"]["containers"][0]
    assert container["image"] == "me/train:1"
    assert container["command"] == ["torchrun", "train.py"]
    assert container["args"] == ["--lr", "0.1"]
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_settings_image_and_security_switch() -> None:
    settings = OperatorSettings(trainer_image="reg/trainer:9", pod_security_defaults=False)
    pod = build_pod(a_job().with_workers(1).job(), "worker", 0, 0, settings)
    assert pod["spec"]["containers"][0]["image"] == "reg/trainer:9"
    assert "securityContext" not in pod["spec"]
    assert "securityContext" not in pod["spec"]["containers"][0]


def test_overlay_is_applied_but_cannot_touch_dtjob_labels_or_contract_env() -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    job = (
        a_job()
        .with_workers(2, gpus=1)
        .with_template(
            "worker",
            labels={"team": "nlp", "dtjob.io/job-name": "other", "dtjob.io/generation": "9"},
            annotations={"note": "x", "dtjob.io/rank": "7"},
            nodeSelector={"gpu": "h100"},
            tolerations=[toleration],
            affinity=affinity,
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            volumeMounts=[{"name": "data", "mountPath": "/data"}],
            env=[{"name": "RANK", "value": "99"}, {"name": "HF_HOME", "value": "/data/hf"}],
            schedulerName="volcano",
            runtimeClassName="nvidia",
        )
    )
    pod = build_pod(job.job(), "worker", 1, 0, SETTINGS)
    labels = pod["metadata"]["labels"]
    assert labels["team"] == "nlp"
    assert labels["dtjob.io/job-name"] == "j" and labels["dtjob.io/generation"] == "0"
    assert pod["metadata"]["annotations"]["note"] == "x"
    assert pod["metadata"]["annotations"]["dtjob.io/rank"] == "1"
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"gpu": "h100"}
    assert spec["tolerations"] == [toleration] and spec["affinity"] == affinity
    assert spec["schedulerName"] == "volcano" and spec["runtimeClassName"] == "nvidia"
    assert spec["volumes"][-1]["name"] == "data"
    assert spec["containers"][0]["volumeMounts"][-1] == {"name": "data", "mountPath": "/data"}
    env = spec["containers"][0]["env"]
    assert [e for e in env if e["name"] == "RANK"] == [{"name": "RANK", "value": "1"}]
    assert env[-1] == {"name": "HF_HOME", "value": "/data/hf"}


PRIORITY = [
    ("none", None, None, None),
    ("job-wide", "high", None, "high"),
    ("role overrides job", "high", "low", "low"),
    ("role only", None, "low", "low"),
]


@pytest.mark.parametrize(
    ("job_pc", "role_pc", "expected"), [p[1:] for p in PRIORITY], ids=[p[0] for p in PRIORITY]
)
def test_priority_class(job_pc: str | None, role_pc: str | None, expected: str | None) -> None:
    job = a_job().with_workers(1)
    if job_pc:
        job = job.with_spec(priorityClassName=job_pc)
    if role_pc:
        job = job.with_template("worker", priorityClassName=role_pc)
    pod = build_pod(job.job(), "worker", 0, 0, SETTINGS)
    assert pod["spec"].get("priorityClassName") == expected


def test_build_children_lists_support_objects_before_the_gang_in_rank_order() -> None:
    job = a_job().with_strategy("ParameterServer").with_workers(2).with_ps(1).job()
    children = build_children(job, SETTINGS, generation=2)
    assert [child_key(c) for c in children] == [
        ("ServiceAccount", "j-trainer"),
        ("Role", "j-progress"),
        ("RoleBinding", "j-progress"),
        ("ConfigMap", "j-config"),
        ("ConfigMap", "j-progress"),
        ("ConfigMap", "j-history"),
        ("Service", "j"),
        ("Pod", "j-worker-0"),
        ("Pod", "j-worker-1"),
        ("Pod", "j-ps-0"),
    ]
    for child in children:
        assert child["metadata"]["ownerReferences"] == [OWNER]
        assert child["metadata"]["labels"]["dtjob.io/job-name"] == "j"
    assert {c["metadata"]["labels"]["dtjob.io/generation"] for c in children[7:]} == {"2"}


@pytest.mark.parametrize("network_policy", [False, True])
def test_the_support_keys_are_those_of_the_built_support_objects(network_policy: bool) -> None:
    from dtjob_operator.builders import build_support_objects, support_keys

    settings = OperatorSettings(network_policy=network_policy)
    template = {"spec": {"serviceAccountName": "own"}}
    for job in (
        a_job().with_strategy("ParameterServer").with_workers(2).with_ps(1).job(),
        a_job("a-much-longer-name-of-a-job", "ns").with_workers(3, gpus=1).job(),
        a_job().with_workers(1, template=template).job(),
    ):
        built = [child_key(m) for m in build_support_objects(job, settings)]
        assert support_keys(job, settings) == built


def test_building_twice_gives_identical_manifests() -> None:
    job = a_job().with_strategy("Hybrid").with_stages(4, gpus=1).job()
    assert build_children(job, SETTINGS) == build_children(job, SETTINGS)


def test_unknown_role_is_an_error() -> None:
    with pytest.raises(KeyError):
        build_pod(a_job().with_workers(1).job(), "ps", 0, 0, SETTINGS)


def test_network_policy_admits_only_the_jobs_own_pods_and_only_when_asked() -> None:
    from dtjob_operator.builders import Job, build_support_objects
    from dtjob_operator.builders.network_policy import build_network_policy

    job = Job.from_object(a_job("j", "ns").with_workers(2, gpus=1).obj())
    policy = build_network_policy(job)
    own = {"matchLabels": {"dtjob.io/job-name": "j"}}
    assert policy["metadata"]["name"] == "j-peers"
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "DistributedTrainingJob"
    assert policy["spec"] == {
        "podSelector": own,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": own}]}],
    }
    kinds = [m["kind"] for m in build_support_objects(job, SETTINGS)]
    assert "NetworkPolicy" not in kinds
    on = SETTINGS.model_copy(update={"network_policy": True})
    assert [m["kind"] for m in build_support_objects(job, on)][-1] == "NetworkPolicy"


@pytest.mark.parametrize(
    ("cpu", "procs", "threads"),
    [
        ("500m", 1, 1),  # a fraction of a core: one thread, not one per core of the node
        ("2", 1, 2),
        ("4", 2, 2),  # the pod's cores shared between its processes
        ("1", 4, 1),  # never fewer than one
        ("96", 8, 12),
        (None, 1, None),  # nothing to go by: torch's own default
        (None, 8, 1),  # several processes and no amount: torchrun's default
    ],
)
def test_omp_threads_follow_the_pods_cpu(cpu: str | None, procs: int, threads: int | None) -> None:
    assert omp_threads(cpu, procs) == threads


def test_a_pods_processes_get_its_cpu_as_threads_unless_the_user_says_otherwise() -> None:
    def env(job: Any) -> dict[str, str]:
        pod = build_pod(job.job(), "worker", 0, 0, SETTINGS)
        return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}

    assert env(a_job().with_workers(2, cpu="500m"))["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in env(a_job().with_workers(2))
    mine = a_job().with_workers(2, cpu="500m")
    mine.with_template("worker", env=[{"name": "OMP_NUM_THREADS", "value": "3"}])
    assert env(mine)["OMP_NUM_THREADS"] == "3"
