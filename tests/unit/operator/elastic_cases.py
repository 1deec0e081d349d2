"""Elastic jobs' spec (issue 29): roles.worker.minReplicas and runPolicy.elastic, refused
where they cannot hold, naming the field. (spec, field, words of the message), shared by
test_guard_cases, test_validation's every-rule-is-exercised check and the API server's test
(integration/test_api_guard_rails)."""

from __future__ import annotations

from typing import Any

from unit.operator.guard_cases import job

ELASTIC_GOOD: list[dict[str, Any]] = [
    job({"replicas": 4, "minReplicas": 2}),
    job({"replicas": 4, "minReplicas": 4}),  # not elastic, but allowed
    job({"replicas": 4, "minReplicas": 1}, strategy={"type": "FSDP"},
        runPolicy={"elastic": {"cooldownSeconds": 300, "maxResizes": 3}}),
    job({"replicas": 2, "minReplicas": 1}, strategy={"type": "CPUOffload"}),
    # A custom command resizes as it likes (the env contract says how).
    job({"replicas": 3, "minReplicas": 1}, strategy={"type": "ParameterServer"},
        trainer={"command": ["torchrun", "train.py"]}),
]  # fmt: skip

ELASTIC_BAD: list[tuple[dict[str, Any], str, str]] = [
    (job({"replicas": 2, "minReplicas": 3}), "spec.roles.worker.minReplicas",
     "must be at most replicas"),
    (job({"replicas": 4, "minReplicas": 2}, strategy={"type": "TensorParallel"}),
     "spec.roles.worker.minReplicas", "tensor-parallel groups have a fixed shape"),
    (job({"replicas": 4, "minReplicas": 2}, strategy={"type": "ParameterServer"},
         roles={"worker": {"replicas": 4, "minReplicas": 2}, "ps": {}}),
     "spec.roles.worker.minReplicas", "with workers only"),
    (job(runPolicy={"elastic": {"cooldownSeconds": 60}}), "spec.runPolicy.elastic",
     "set roles.worker.minReplicas"),
]  # fmt: skip
