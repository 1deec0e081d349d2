"""The env contract is written twice on purpose: the operator builds it for pods
(dtjob_operator.envcontract) and the trainer's launcher builds it for local processes
(dtjob_trainer.layout), because the trainer must not depend on the operator. This test holds
the two to the same answer for every example job, through the config the operator mounts,
and checks that the trainer reads the operator's env back to the same ranks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dtjob_api import DistributedTrainingJobSpec
from dtjob_operator.builders.configmaps import config_json
from dtjob_operator.builders.job import Job
from dtjob_operator.constants import CONFIG_PATH
from dtjob_operator.envcontract import build_env, resolve_backend
from dtjob_operator.naming import history_config_map_name, progress_config_map_name
from dtjob_trainer.config import load_config
from dtjob_trainer.env import read_env
from dtjob_trainer.layout import plan_pods, pod_env
from helpers.examples import load_job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MANIFESTS = sorted([*EXAMPLES.glob("*.yaml"), *EXAMPLES.glob("cpu/*.yaml")])
# The operator fills in its cluster-wide default interface and the container's termination
# message path (no such file outside a container); the launcher leaves them unset.
# Set by the operator only: a local launch takes the heartbeat knobs from its own
# environment (docs/env-contract.md, "Heartbeats").
OPERATOR_ONLY = {
    "NCCL_SOCKET_IFNAME",
    "TORCHELASTIC_ERROR_FILE",
    "DTJ_HEARTBEAT_SECONDS",
    "DTJ_STALL_DUMP_SECONDS",
}


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = load_job(path)
    return doc


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_operator_and_trainer_lay_out_the_same_env(path: Path) -> None:
    manifest = load(path)
    name, ns = manifest["metadata"]["name"], "team-a"
    job = Job(
        name=name,
        namespace=ns,
        uid="uid-1",
        spec=DistributedTrainingJobSpec.model_validate(manifest["spec"]),
    )
    # The trainer sees exactly the bytes the operator mounts at DTJ_CONFIG.
    cfg = load_config(json.loads(config_json(job)))
    backend = resolve_backend(job.spec)
    slots = plan_pods(cfg)
    assert slots, "a job has at least one pod"

    for slot in slots:
        operator_env = {
            e["name"]: e["value"] for e in build_env(name, ns, job.spec, slot.role, slot.index, 3)
        }
        trainer_env = pod_env(
            cfg,
            slot,
            job=name,
            namespace=ns,
            config_path=CONFIG_PATH,
            checkpoint_dir=job.spec.checkpoint.mountPath,
            backend=backend,
            progress_configmap=progress_config_map_name(name),
            history_configmap=history_config_map_name(name),
            gang_generation=3,
        )
        shared = {k: v for k, v in operator_env.items() if k not in OPERATOR_ONLY}
        assert shared == trainer_env, f"{slot.role}-{slot.index}"

        env = read_env(operator_env)
        assert env.pod_rank == slot.rank
        assert env.world_size == cfg.world_size()
        assert env.local_world_size == slot.procs
        assert (env.role, env.role_index) == (slot.role, slot.index)
