"""The environment contract: reading it (env.py) and laying out ranks (layout.py) exactly
as docs/env-contract.md says and as the operator's builder does."""

from __future__ import annotations

from typing import Any

import pytest
from unit.trainer.harness import a_spec

from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_operator.envcontract import build_env
from dtjob_trainer.config import load_config
from dtjob_trainer.env import read_env
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.layout import plan_pods, pod_env

BASE = {
    "MASTER_ADDR": "j-worker-0.j.ns.svc",
    "MASTER_PORT": "29500",
    "WORLD_SIZE": "6",
    "RANK": "2",
    "LOCAL_WORLD_SIZE": "2",
    "DTJ_CONFIG": "/etc/dtjob/config.json",
}


def test_read_env_parses_every_variable() -> None:
    env = read_env(
        {
            **BASE,
            "LOCAL_RANK": "1",
            "NNODES": "3",
            "NODE_RANK": "1",
            "DTJ_JOB": "j",
            "DTJ_NAMESPACE": "ns",
            "DTJ_ROLE": "ps",
            "DTJ_ROLE_INDEX": "0",
            "DTJ_STRATEGY": "ParameterServer",
            "DTJ_BACKEND": "gloo",
            "DTJ_CHECKPOINT_DIR": "/ck",
            "DTJ_RENDEZVOUS_TIMEOUT": "30",
            "DTJ_PROGRESS_CONFIGMAP": "j-progress",
            "DTJ_HISTORY_CONFIGMAP": "j-history",
            "DTJ_HISTORY_INTERVAL": "12.5",
            "DTJ_GANG_GENERATION": "4",
            "DTJ_PS_HOSTS": "a,b",
            "DTJ_WORKER_HOSTS": "c",
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
        }
    )
    assert env.rank == 3 and env.pod_rank == 2 and env.local_rank == 1 and env.local_rank_set
    assert (env.world_size, env.nnodes, env.node_rank) == (6, 3, 1)
    assert (env.role, env.role_index, env.backend) == ("ps", 0, "gloo")
    assert env.ps_hosts == ("a", "b") and env.worker_hosts == ("c",)
    assert (env.rendezvous_timeout, env.gang_generation) == (30.0, 4)
    assert env.in_cluster and env.progress_configmap == "j-progress"
    assert (env.history_configmap, env.history_interval) == ("j-history", 12.5)
    assert env.pp_size is None and env.stage_index is None


def test_defaults_for_a_bare_local_process() -> None:
    env = read_env(BASE)
    assert env.rank == 2 and not env.local_rank_set and not env.in_cluster
    assert env.checkpoint_dir == "/checkpoints" and env.rendezvous_timeout == 300.0
    assert env.history_interval == 30.0 and env.history_configmap is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"RANK": None}, "environment variable RANK: required"),
        ({"WORLD_SIZE": "two"}, "environment variable WORLD_SIZE: 'two' is not an integer"),
        ({"DTJ_HISTORY_INTERVAL": "soon"}, "DTJ_HISTORY_INTERVAL: 'soon' is not a number"),
        ({"LOCAL_RANK": "2"}, "environment variable LOCAL_RANK: 2 must be below"),
        ({"RANK": "5"}, "environment variable RANK: 5 + LOCAL_WORLD_SIZE 2 exceeds WORLD_SIZE"),
        ({"DTJ_CONFIG": ""}, "environment variable DTJ_CONFIG: required"),
    ],
)
def test_bad_environment_names_the_variable(change: dict[str, Any], message: str) -> None:
    environ = {**BASE, **change}
    environ = {k: v for k, v in environ.items() if v is not None}
    with pytest.raises(ConfigError) as exc:
        read_env(environ)
    assert message in str(exc.value)


def test_rank_order_is_worker_stage_ps_then_pod_then_local() -> None:
    spec = a_spec("ParameterServer", workers=2, ps=2, procs_per_pod=2)
    pods = plan_pods(load_config(spec))
    assert [(p.role, p.index, p.rank, p.procs, p.node_rank) for p in pods] == [
        ("worker", 0, 0, 2, 0),
        ("worker", 1, 2, 2, 1),
        ("ps", 0, 4, 1, 2),
        ("ps", 1, 5, 1, 3),
    ]
    assert list(pods[1].ranks()) == [2, 3]


SPECS = {
    "dp": a_spec("DataParallel", workers=3, batchSize=30),
    "dp-multi": a_spec("DataParallel", workers=2, procs_per_pod=4),
    "ps": a_spec("ParameterServer", workers=2, ps=2),
    "pipeline": a_spec("Pipeline", workers=None, stages=4),
    "hybrid": a_spec(
        "Hybrid", workers=None, stages=4, strategy_extra={"hybrid": {"dataParallel": 2}}
    ),
}
# Values the operator takes from its own settings or the cluster (TORCHELASTIC_ERROR_FILE:
# the container's termination message path, no such file outside a container).
LOCAL_ONLY = {
    "DTJ_CONFIG",
    "DTJ_PROGRESS_CONFIGMAP",
    "DTJ_HISTORY_CONFIGMAP",
    "NCCL_SOCKET_IFNAME",
    "DTJ_BACKEND",
    "TORCHELASTIC_ERROR_FILE",
    "DTJ_HEARTBEAT_SECONDS",
    "DTJ_STALL_DUMP_SECONDS",
}


@pytest.mark.parametrize("name", list(SPECS))
def test_layout_matches_the_operator(name: str) -> None:
    spec = SPECS[name]
    cfg = load_config(spec)
    op_spec = DistributedTrainingJobSpec.model_validate(spec)
    for pod in plan_pods(cfg):
        ours = pod_env(
            cfg,
            pod,
            job="j",
            namespace="ns",
            config_path="/cfg",
            checkpoint_dir=spec.get("checkpoint", {}).get("mountPath", "/checkpoints"),
            backend="gloo",
        )
        theirs = {
            e["name"]: e["value"] for e in build_env("j", "ns", op_spec, pod.role, pod.index, 0)
        }
        for key in LOCAL_ONLY:
            ours.pop(key, None)
            theirs.pop(key, None)
        assert ours == theirs, f"{pod.role}-{pod.index}"
