"""The env contract (docs/env-contract.md): rank order per strategy, shared variables, and
that every documented variable is set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from unit.operator.builders import JobBuilder, a_job

from dtjob_operator.envcontract import build_env, rank_layout, resolve_backend

DOC = Path(__file__).resolve().parents[3] / "docs" / "env-contract.md"


def env_of(job: JobBuilder, role: str, index: int, generation: int = 0) -> dict[str, str]:
    spec = job.job().spec
    env = build_env(job.name, job.namespace, spec, role, index, generation)
    names = [var["name"] for var in env]
    assert len(names) == len(set(names)), "duplicate variable"
    return {var["name"]: var["value"] for var in env}


# (job, [(pod, RANK, LOCAL_WORLD_SIZE, NODE_RANK)], WORLD_SIZE, rank-0 pod)
RANK_TABLES = {
    "DataParallel": (
        a_job().with_strategy("DataParallel").with_workers(2, gpus=2),
        [("worker-0", 0, 2, 0), ("worker-1", 2, 2, 1)],
        4,
        "worker-0",
    ),
    "FSDP": (
        a_job().with_strategy("FSDP").with_workers(3, gpus=4),
        [("worker-0", 0, 4, 0), ("worker-1", 4, 4, 1), ("worker-2", 8, 4, 2)],
        12,
        "worker-0",
    ),
    "CPUOffload": (
        a_job().with_strategy("CPUOffload").with_workers(1, gpus=1),
        [("worker-0", 0, 1, 0)],
        1,
        "worker-0",
    ),
    "Auto-cpu": (
        a_job().with_strategy("Auto").with_workers(2),
        [("worker-0", 0, 1, 0), ("worker-1", 1, 1, 1)],
        2,
        "worker-0",
    ),
    "procsPerPod-overrides-gpus": (
        a_job().with_strategy("DataParallel").with_workers(2, gpus=0, procsPerPod=3),
        [("worker-0", 0, 3, 0), ("worker-1", 3, 3, 1)],
        6,
        "worker-0",
    ),
    # Parameter servers take the highest ranks, after every worker process.
    "ParameterServer": (
        a_job().with_strategy("ParameterServer").with_workers(3, gpus=1).with_ps(2),
        [
            ("worker-0", 0, 1, 0),
            ("worker-1", 1, 1, 1),
            ("worker-2", 2, 1, 2),
            ("ps-0", 3, 1, 3),
            ("ps-1", 4, 1, 4),
        ],
        5,
        "worker-0",
    ),
    "ParameterServer-multi-gpu-workers": (
        a_job().with_strategy("ParameterServer").with_workers(2, gpus=2).with_ps(1),
        [("worker-0", 0, 2, 0), ("worker-1", 2, 2, 1), ("ps-0", 4, 1, 2)],
        5,
        "worker-0",
    ),
    "ModelParallel": (
        a_job().with_strategy("ModelParallel").with_stages(2, gpus=1),
        [("stage-0", 0, 1, 0), ("stage-1", 1, 1, 1)],
        2,
        "stage-0",
    ),
    "Pipeline": (
        a_job().with_strategy("Pipeline").with_stages(4, gpus=1),
        [("stage-0", 0, 1, 0), ("stage-1", 1, 1, 1), ("stage-2", 2, 1, 2), ("stage-3", 3, 1, 3)],
        4,
        "stage-0",
    ),
    "Hybrid": (
        a_job().with_strategy("Hybrid", hybrid={"dataParallel": 2}).with_stages(2, gpus=2),
        [("stage-0", 0, 2, 0), ("stage-1", 2, 2, 1)],
        4,
        "stage-0",
    ),
}


@pytest.mark.parametrize("case", RANK_TABLES.values(), ids=RANK_TABLES.keys())
def test_rank_order_per_strategy(case: tuple[JobBuilder, list, int, str]) -> None:
    job, expected, world_size, master = case
    for pod, rank, local, node_rank in expected:
        role, index = pod.rsplit("-", 1)
        env = env_of(job, role, int(index))
        got = (env["RANK"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"], env["PET_NODE_RANK"])
        assert got == (str(rank), str(local), str(node_rank), str(node_rank)), pod
        assert env["PET_NPROC_PER_NODE"] == str(local)
        assert env["WORLD_SIZE"] == str(world_size)
        assert env["NNODES"] == env["PET_NNODES"] == str(len(expected))
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == f"j-{master}.j.ns.svc"
        assert env["DTJ_ROLE"] == role and env["DTJ_ROLE_INDEX"] == index
    assert rank_layout(job.job().spec).world_size == world_size


# (job, {pod: (DTJ_PP_SIZE, DTJ_DP_SIZE, DTJ_STAGE_INDEX)})
PIPELINE_TABLES = {
    "ModelParallel": (
        a_job().with_strategy("ModelParallel").with_stages(3),
        {"stage-0": ("3", "1", "0"), "stage-1": ("3", "1", "1"), "stage-2": ("3", "1", "2")},
    ),
    "Pipeline": (
        a_job().with_strategy("Pipeline").with_stages(2, gpus=1),
        {"stage-0": ("2", "1", "0"), "stage-1": ("2", "1", "1")},
    ),
    # DeviceMesh (pp, dp) row-major: rank = pp_index * dp + dp_index, stage = rank // dp.
    "Hybrid-one-process-per-pod": (
        a_job().with_strategy("Hybrid", hybrid={"dataParallel": 2}).with_stages(6),
        {
            "stage-0": ("3", "2", "0"),
            "stage-1": ("3", "2", "0"),
            "stage-2": ("3", "2", "1"),
            "stage-3": ("3", "2", "1"),
            "stage-4": ("3", "2", "2"),
            "stage-5": ("3", "2", "2"),
        },
    ),
    "Hybrid-dp-inside-a-pod": (
        a_job().with_strategy("Hybrid", hybrid={"dataParallel": 2}).with_stages(2, gpus=2),
        {"stage-0": ("2", "2", "0"), "stage-1": ("2", "2", "1")},
    ),
    # DeviceMesh (pp, dp, tp) row-major: a stage spans dp x tp ranks, tp peers in a pod.
    "Hybrid-tp-inside-a-pod": (
        a_job()
        .with_strategy("Hybrid", hybrid={"dataParallel": 2}, tensorParallel={"size": 2})
        .with_stages(4, gpus=2),
        {"stage-0": ("2", "2", "0"), "stage-1": ("2", "2", "0"), "stage-2": ("2", "2", "1")},
    ),
    "Pipeline-tp": (
        a_job().with_strategy("Pipeline", tensorParallel={"size": 2}).with_stages(4),
        {"stage-0": ("2", "1", "0"), "stage-1": ("2", "1", "0"), "stage-3": ("2", "1", "1")},
    ),
    "Hybrid-default-dp": (
        a_job().with_strategy("Hybrid").with_stages(4),
        {"stage-0": ("2", "2", "0"), "stage-3": ("2", "2", "1")},
    ),
}


@pytest.mark.parametrize("case", PIPELINE_TABLES.values(), ids=PIPELINE_TABLES.keys())
def test_pipeline_degrees_and_stage_of_each_pod(case: tuple[JobBuilder, dict]) -> None:
    job, expected = case
    for pod, degrees in expected.items():
        role, index = pod.rsplit("-", 1)
        env = env_of(job, role, int(index))
        assert (env["DTJ_PP_SIZE"], env["DTJ_DP_SIZE"], env["DTJ_STAGE_INDEX"]) == degrees, pod


def test_tp_size_is_the_stage_split_and_1_without_one() -> None:
    tp = a_job().with_strategy("Pipeline", tensorParallel={"size": 2}).with_stages(4)
    assert env_of(tp, "stage", 1)["DTJ_TP_SIZE"] == "2"
    plain = a_job().with_strategy("Hybrid").with_stages(4)
    assert env_of(plain, "stage", 1)["DTJ_TP_SIZE"] == "1"


@pytest.mark.parametrize("strategy", ["DataParallel", "FSDP", "CPUOffload", "Auto"])
def test_pipeline_and_ps_variables_only_where_they_mean_something(strategy: str) -> None:
    env = env_of(a_job().with_strategy(strategy).with_workers(2), "worker", 0)
    for name in ("DTJ_PP_SIZE", "DTJ_DP_SIZE", "DTJ_TP_SIZE", "DTJ_STAGE_INDEX", "DTJ_PS_HOSTS"):
        assert name not in env


def test_parameter_server_hosts_list_every_pod_by_dns_name() -> None:
    job = a_job("ps", "ml").with_strategy("ParameterServer").with_workers(2).with_ps(2)
    for role, index in [("worker", 0), ("ps", 1)]:
        env = env_of(job, role, index)
        assert env["DTJ_PS_HOSTS"] == "ps-ps-0.ps.ml.svc,ps-ps-1.ps.ml.svc"
        assert env["DTJ_WORKER_HOSTS"] == "ps-worker-0.ps.ml.svc,ps-worker-1.ps.ml.svc"


BACKENDS = [
    ("gpu workers -> nccl", a_job().with_workers(2, gpus=1), "nccl"),
    ("cpu workers -> gloo", a_job().with_workers(2), "gloo"),
    (
        "explicit gloo on gpus",
        a_job().with_strategy("FSDP", backend="gloo").with_workers(1, gpus=1),
        "gloo",
    ),
    (
        "explicit nccl",
        a_job().with_strategy("DataParallel", backend="nccl").with_workers(1),
        "nccl",
    ),
    # c10d point-to-point between GPU workers and CPU servers needs gloo.
    (
        "ps -> gloo",
        a_job().with_strategy("ParameterServer").with_workers(2, gpus=1).with_ps(1),
        "gloo",
    ),
    ("pipeline gpus", a_job().with_strategy("Pipeline").with_stages(2, gpus=1), "nccl"),
    # Sync and synchronous EASGD only run collectives: NCCL when every rank has a GPU.
    (
        "ps sync, gpus everywhere -> nccl",
        a_job().with_strategy("ParameterServer").with_workers(2, gpus=1).with_ps(1, gpus=1),
        "nccl",
    ),
    (
        "ps sync without ps role -> nccl",
        a_job().with_strategy("ParameterServer").with_workers(2, gpus=1),
        "nccl",
    ),
    (
        "ps async, gpus everywhere -> gloo",
        a_job()
        .with_strategy("ParameterServer", parameterServer={"mode": "Async"})
        .with_workers(2, gpus=1)
        .with_ps(1, gpus=1),
        "gloo",
    ),
    (
        "ps sync, cpu workers -> gloo",
        a_job().with_strategy("ParameterServer").with_workers(2).with_ps(1),
        "gloo",
    ),
]


@pytest.mark.parametrize(
    ("job", "backend"), [b[1:] for b in BACKENDS], ids=[b[0] for b in BACKENDS]
)
def test_backend_auto_resolution(job: JobBuilder, backend: str) -> None:
    assert resolve_backend(job.job().spec) == backend


def test_gpu_and_cpu_pods_of_one_job_agree_on_the_backend() -> None:
    # GPU workers next to CPU parameter servers: one collective, one backend for all.
    job = a_job().with_strategy("ParameterServer").with_workers(2, gpus=1).with_ps(1)
    assert {env_of(job, r, 0)["DTJ_BACKEND"] for r in ("worker", "ps")} == {"gloo"}
    job = a_job().with_strategy("ParameterServer", backend="nccl").with_workers(1, gpus=1)
    job = job.with_ps(1)
    assert {env_of(job, r, 0)["DTJ_BACKEND"] for r in ("worker", "ps")} == {"nccl"}


def test_job_wide_variables_follow_the_spec() -> None:
    job = (
        a_job("train", "team-a")
        .with_workers(1)
        .with_network(
            masterPort=23456, rendezvousTimeoutSeconds=42, ncclDebug="INFO", ncclSocketIfname="ib0"
        )
        .with_checkpoint(mountPath="/ckpt")
    )
    env = env_of(job, "worker", 0, generation=3)
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
    assert env["DTJ_RENDEZVOUS_TIMEOUT"] == "42"
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert env["DTJ_CHECKPOINT_DIR"] == "/ckpt"
    assert env["DTJ_GANG_GENERATION"] == "3"
    assert env["DTJ_JOB"] == "train" and env["DTJ_NAMESPACE"] == "team-a"
    assert env["DTJ_CONFIG"] == "/etc/dtjob/config.json"
    assert env["DTJ_PROGRESS_CONFIGMAP"] == "train-progress"
    assert env["DTJ_STRATEGY"] == "DataParallel"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert env["TORCHELASTIC_ERROR_FILE"] == "/dev/termination-log"


def test_nccl_defaults_without_network_settings() -> None:
    env = env_of(a_job().with_workers(1), "worker", 0)
    assert (env["NCCL_DEBUG"], env["NCCL_SOCKET_IFNAME"], env["MASTER_PORT"]) == (
        "WARN",
        "eth0",
        "29500",
    )


def documented_variables() -> set[str]:
    """Every variable named in the first column of the doc's tables."""
    names: set[str] = set()
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names |= set(re.findall(r"`([A-Z][A-Z0-9_]+)(?:=[^`]*)?`", first_cell))
    return names


def test_every_documented_variable_is_set_for_some_strategy() -> None:
    documented = documented_variables()
    assert {"MASTER_ADDR", "DTJ_PS_HOSTS", "DTJ_STAGE_INDEX", "NCCL_SOCKET_IFNAME"} <= documented
    emitted = set()
    for job, role in [
        (a_job().with_strategy("ParameterServer").with_workers(1).with_ps(1), "worker"),
        (a_job().with_strategy("Hybrid").with_stages(2), "stage"),
    ]:
        emitted |= set(env_of(job, role, 0))
    assert documented - emitted == set()


def test_every_value_is_a_string() -> None:
    spec = a_job().with_strategy("Hybrid").with_stages(4, gpus=1).job().spec
    for var in build_env("j", "ns", spec, "stage", 3, 1):
        assert isinstance(var["value"], str), var


@pytest.mark.parametrize(
    ("deadline", "beat", "dump"),
    [(None, "10", "450"), (600, "10", "450"), (30, "5", "22"), (10, "1", "7")],
)
def test_heartbeats_come_faster_under_a_short_progress_deadline(
    deadline: int | None, beat: str, dump: str
) -> None:
    # Two silent beats make a rank "stopped" in rank 0's summary: that must reach the
    # operator before the deadline does, or the stall is declared without the rank named.
    job = a_job().with_workers(2)
    if deadline is not None:
        job = job.with_run_policy(progressDeadlineSeconds=deadline)
    env = env_of(job, "worker", 0)
    assert (env["DTJ_HEARTBEAT_SECONDS"], env["DTJ_STALL_DUMP_SECONDS"]) == (beat, dump)
