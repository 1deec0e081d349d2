"""Specs refused at apply that once got through (issue: guard rails and validation holes):
paths spelled around the reserved directories, specs that could never run, settings that
contradict each other. (spec, field, words of the message), shared by test_guard_rails,
test_validation's every-rule-is-exercised check and the API server's test
(integration/test_api_guard_rails)."""

from __future__ import annotations

from typing import Any


def job(
    worker: dict[str, Any] | None = None, *, strategy: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    """2 worker pods of 1 GPU, with these extra worker settings and spec fields."""
    roles = spec.pop("roles", None) or {"worker": {"replicas": 2, "gpus": 1, **(worker or {})}}
    return {"strategy": strategy or {"type": "DataParallel"}, "roles": roles, **spec}


def tokens(**dataset: Any) -> dict[str, Any]:
    return {"model": {"type": "GPT"}, "dataset": {"type": "SyntheticTokens", **dataset}}


GUARD_GOOD: list[dict[str, Any]] = [
    job(checkpoint={"mountPath": "/checkpoints/"}),
    job(checkpoint={"mountPath": "/dev/shmem"}),  # a neighbour of /dev/shm, not inside it
    job(trainer={"codePath": "/code/.hidden/..pkg"}),
    job({"extendedResources": {"rdma/hca_shared_devices_a": "2", "hugepages-2Mi": "1536Mi"}}),
    job({"extendedResources": {"vpc.amazonaws.com/efa": 4, "example.com/dev": "2k"}}),
    job({"gpus": 2, "gpuResource": "amd.com/gpu"}, strategy={"type": "DataParallel",
                                                             "backend": "nccl"}),
    job(runPolicy={"retryableExitCodes": [75], "permanentExitCodes": [137]}),
    job(trainer={"model": {"type": "GPT"},
                 "dataset": {"type": "TokenFile", "path": "/d/t.bin", "dtype": "uint32"}}),
    job(roles={"worker": {"replicas": 2}}, strategy={"type": "DataParallel", "backend": "gloo"}),
    job(placement={"topology": {"required": "network.example.com/rack"}}),
    job(placement={"topology": {"preferred": "kubernetes.io/hostname"}}),
]  # fmt: skip

GUARD_BAD: list[tuple[dict[str, Any], str, str]] = [
    (job(checkpoint={"mountPath": "/dev//shm"}), "spec.checkpoint.mountPath",
     "written plainly"),
    (job(checkpoint={"mountPath": "/tmp/../etc/dtjob"}), "spec.checkpoint.mountPath",
     "written plainly"),
    (job(checkpoint={"mountPath": "/etc/dtjob/ckpt"}), "spec.checkpoint.mountPath",
     "/etc/dtjob"),
    (job(trainer={"codePath": "code"}), "spec.trainer.codePath", "must be an absolute path"),
    (job(trainer={"codePath": "/dev/shm/code"}), "spec.trainer.codePath", "outside /dev/shm"),
    (job(trainer={"codePath": "/x/../etc/dtjob"}), "spec.trainer.codePath", "'..'"),
    # The API server's words are its pattern's; the operator's say "whole units".
    (job({"extendedResources": {"rdma/hca_shared_devices_a": "0.5"}}),
     "spec.roles.worker.extendedResources.rdma/hca_shared_devices_a", "0.5"),
    (job({"extendedResources": {"example.com/dev": "500m"}}),
     "spec.roles.worker.extendedResources.example.com/dev", "500m"),
    (job({"extendedResources": {"hugepages-2Mi": "0.5Gi"}}),
     "spec.roles.worker.extendedResources.hugepages-2Mi", "0.5Gi"),
    (job(strategy={"type": "DataParallel", "backend": "nccl"}, roles={"worker": {"replicas": 2}}),
     "spec.strategy.backend", "nccl needs a GPU in every pod"),
    (job(strategy={"type": "ParameterServer", "backend": "nccl"},
         roles={"worker": {"replicas": 2, "gpus": 1}, "ps": {"replicas": 1}}),
     "spec.strategy.backend", "nccl needs a GPU in every pod"),
    (job({"gpus": 0, "gpuResource": "amd.com/gpu"}), "spec.roles.worker.gpuResource",
     "names a GPU while gpus is 0"),
    (job(strategy={"type": "ParameterServer"},
         roles={"worker": {"replicas": 2, "gpus": 1},
                "ps": {"replicas": 1, "gpuResource": "nvidia.com/mig-1g.10gb"}}),
     "spec.roles.ps.gpuResource", "names a GPU while gpus is 0"),
    (job(strategy={"type": "Pipeline"},
         roles={"stage": {"replicas": 2, "gpuResource": "amd.com/gpu"}}),
     "spec.roles.stage.gpuResource", "names a GPU while gpus is 0"),
    (job(runPolicy={"retryableExitCodes": [75, 3], "permanentExitCodes": [3]}),
     "spec.runPolicy.permanentExitCodes", "may not also be in runPolicy.retryableExitCodes"),
    (job(trainer={"dataset": {"type": "Digits", "dtype": "uint32"}}),
     "spec.trainer.dataset.dtype", "only allowed with trainer.dataset.type TokenFile"),
    (job(trainer={"dataset": {"type": "Digits", "imageSize": 8}}),
     "spec.trainer.dataset.imageSize", "only allowed with trainer.dataset.type ImageFolder"),
    (job(trainer=tokens(inputColumn="ids")),
     "spec.trainer.dataset.inputColumn", "only allowed with trainer.dataset.type HFDisk"),
    (job(trainer=tokens(targetColumn="y")),
     "spec.trainer.dataset.targetColumn", "only allowed with trainer.dataset.type HFDisk"),
    (job(placement={"topology": {}}), "spec.placement.topology", "exactly one of required"),
    (job(placement={"topology": {"required": "example.com/rack",
                                 "preferred": "example.com/block"}}),
     "spec.placement.topology", "exactly one of required"),
    (job(placement={"topology": {"required": "rack name"}}), "spec.placement.topology.required",
     "rack name"),
]  # fmt: skip
