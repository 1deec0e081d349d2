"""The CRD on a real kube-apiserver: malformed jobs are refused with a message naming the
field, every example is accepted, the server fills in the models' defaults, only suspend
and the run policy's deadline and TTL may change, and `kubectl get dtj` shows the columns.

Each refusal is also checked against validate_job, the operator's backstop: both must
blame the same field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dtjob_api import GROUP, KIND, PLURAL, VERSION
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.status import JobPhase
from dtjob_api.validation import validate_job
from dtjob_operator.builders.job import Job
from dtjob_operator.status import StatusDecision, compute_status
from helpers.crd import install_crd
from helpers.examples import load_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DP = {"strategy": {"type": "DataParallel"}, "roles": {"worker": {"replicas": 2}}}


@pytest.fixture(scope="module")
def jobs(cluster: Any) -> client.CustomObjectsApi:
    install_crd(cluster.api)
    return client.CustomObjectsApi(cluster.api)


def manifest(spec: dict[str, Any], name: str = "job") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def with_(base: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """A copy of `base` with each dotted path (`__` for `.`) set; None deletes it."""
    out = copy.deepcopy(base)
    for dotted, value in paths.items():
        node = out
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return out


def create(
    jobs: client.CustomObjectsApi, ns: str, body: dict[str, Any], dry_run: bool = True
) -> dict[str, Any]:
    # Strict field validation, as kubectl uses: an unknown field is an error, not pruned.
    return jobs.create_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP,
        VERSION,
        ns,
        PLURAL,
        body,
        dry_run="All" if dry_run else None,
        field_validation="Strict",
    )


def refusal(call: Any) -> str:
    """The API server's message for a call that must be refused as invalid."""
    with pytest.raises(client.ApiException) as err:
        call()
    assert err.value.status in (400, 422), err.value.body
    return str(json.loads(err.value.body)["message"])


# (id, metadata.name, spec, field the server names, words of its message)
BAD: list[tuple[str, str, dict[str, Any], str, str]] = [
    ("unknown-strategy", "job", with_(DP, strategy__type="Magic"), "spec.strategy.type",
     'Unsupported value: "Magic"'),
    ("missing-strategy", "job", with_(DP, strategy=None), "spec.strategy", "Required value"),
    ("missing-worker", "job", with_(DP, roles={}), "spec.roles.worker",
     "required for strategy DataParallel"),
    ("ps-with-data-parallel", "job", with_(DP, roles__ps={}), "spec.roles.ps",
     "only allowed with strategy ParameterServer, not DataParallel"),
    ("stage-with-fsdp", "job", with_(DP, strategy__type="FSDP", roles__stage={}),
     "spec.roles.stage", "not allowed with strategy FSDP"),
    ("missing-stage", "job", with_(DP, strategy__type="Pipeline", roles={}), "spec.roles.stage",
     "required for strategy Pipeline"),
    ("worker-with-hybrid", "job",
     with_(DP, strategy__type="Hybrid", roles__stage={"replicas": 4}), "spec.roles.worker",
     "not allowed with strategy Hybrid"),
    ("async-without-ps", "job",
     with_(DP, strategy={"type": "ParameterServer", "parameterServer": {"mode": "Async"}}),
     "spec.roles.ps", "required for strategy ParameterServer in mode Async"),
    ("hogwild-pods-without-ps", "job",
     with_(DP, strategy={"type": "ParameterServer", "parameterServer": {"mode": "Hogwild"}}),
     "spec.roles.ps", "mode Hogwild"),
    ("ps-settings-with-data-parallel", "job",
     with_(DP, strategy__parameterServer={"mode": "Sync"}), "spec.strategy.parameterServer",
     "only allowed with strategy ParameterServer"),
    ("pipeline-settings-with-data-parallel", "job",
     with_(DP, strategy__pipeline={"microbatches": 4}), "spec.strategy.pipeline",
     "only allowed with strategy Pipeline or Hybrid, not DataParallel"),
    ("hybrid-settings-with-pipeline", "job",
     {"strategy": {"type": "Pipeline", "hybrid": {}}, "roles": {"stage": {"replicas": 2}}},
     "spec.strategy.hybrid", "only allowed with strategy Hybrid"),
    ("1f1b-too-few-microbatches", "job",
     {"strategy": {"type": "Pipeline", "pipeline": {"schedule": "1F1B", "microbatches": 2}},
      "roles": {"stage": {"replicas": 4}}},
     "spec.strategy.pipeline.microbatches",
     "schedule 1F1B needs at least as many micro-batches as pipeline ranks"),
    ("interleaved-too-few-microbatches", "job",
     {"strategy": {"type": "Pipeline",
                   "pipeline": {"schedule": "Interleaved1F1B", "microbatches": 4}},
      "roles": {"stage": {"replicas": 4, "procsPerPod": 2}}},
     "spec.strategy.pipeline.microbatches", "schedule Interleaved1F1B needs at least as many"),
    ("pipedream-2bw-too-few-microbatches", "job",
     {"strategy": {"type": "Pipeline",
                   "pipeline": {"schedule": "PipeDream2BW", "microbatches": 2}},
      "roles": {"stage": {"replicas": 4}}},
     "spec.strategy.pipeline.microbatches", "schedule PipeDream2BW needs at least as many"),
    ("hybrid-pipedream", "job",
     {"strategy": {"type": "Hybrid", "hybrid": {"dataParallel": 2},
                   "pipeline": {"schedule": "PipeDream", "microbatches": 4}},
      "roles": {"stage": {"replicas": 4}}},
     "spec.strategy.pipeline.schedule", "runs with strategy Pipeline only"),
    ("hybrid-1f1b-below-pipeline-degree", "job",
     {"strategy": {"type": "Hybrid", "hybrid": {"dataParallel": 2},
                   "pipeline": {"schedule": "1F1B", "microbatches": 2}},
      "roles": {"stage": {"replicas": 8}}},
     "spec.strategy.pipeline.microbatches", "for Hybrid divided by strategy.hybrid.dataParallel"),
    ("model-parallel-one-stage", "job",
     {"strategy": {"type": "ModelParallel"}, "roles": {"stage": {"replicas": 1}}},
     "spec.roles.stage", "at least 2 stage processes"),
    ("hybrid-not-divisible", "job",
     {"strategy": {"type": "Hybrid", "hybrid": {"dataParallel": 2}},
      "roles": {"stage": {"replicas": 3}}},
     "spec.strategy.hybrid.dataParallel", "must divide the stage processes"),
    ("hybrid-pipeline-degree-one", "job",
     {"strategy": {"type": "Hybrid", "hybrid": {"dataParallel": 2}},
      "roles": {"stage": {"replicas": 2}}},
     "spec.roles.stage", "pipeline degree"),
    ("batch-smaller-than-workers", "job",
     with_(DP, roles__worker={"replicas": 3}, trainer={"batchSize": 2}),
     "spec.trainer.batchSize", "must be at least the worker processes"),
    ("batch-not-divisible-by-microbatches", "job",
     {"strategy": {"type": "Pipeline", "pipeline": {"microbatches": 4}},
      "roles": {"stage": {"replicas": 2}}, "trainer": {"batchSize": 66}},
     "spec.trainer.batchSize", "divisible by strategy.pipeline.microbatches"),
    ("async-batch-not-divisible", "job",
     {"strategy": {"type": "ParameterServer", "parameterServer": {"mode": "Async"}},
      "roles": {"worker": {"replicas": 3}, "ps": {}}},
     "spec.trainer.batchSize", "every global batch is split evenly over them"),
    ("hogwild-batch-not-divisible", "job",
     {"strategy": {"type": "ParameterServer",
                   "parameterServer": {"mode": "Hogwild", "hogwildProcesses": 4}},
      "roles": {"worker": {}}, "trainer": {"batchSize": 30}},
     "spec.trainer.batchSize", "divisible by the Hogwild processes"),
    ("more-stages-than-model-blocks", "job",
     {"strategy": {"type": "Pipeline"}, "roles": {"stage": {"replicas": 5}}},
     "spec.roles.stage", "more pipeline stages than the model has blocks"),
    ("gpt-on-digits", "job", with_(DP, trainer={"model": {"type": "GPT"}}),
     "spec.trainer.dataset.type", "GPT trains on SyntheticTokens"),
    ("dmodel-not-multiple-of-heads", "job",
     with_(DP, trainer={"model": {"type": "GPT", "dModel": 100, "heads": 8},
                        "dataset": {"type": "SyntheticTokens"}}),
     "spec.trainer.model.dModel", "must be a multiple of trainer.model.heads"),
    ("zero-replicas", "job", with_(DP, roles__worker__replicas=0),
     "spec.roles.worker.replicas", "should be greater than or equal to 1"),
    ("negative-replicas", "job", with_(DP, roles__worker__replicas=-2),
     "spec.roles.worker.replicas", "should be greater than or equal to 1"),
    ("fractional-gpus", "job", with_(DP, roles__worker__gpus=0.5),
     "spec.roles.worker.gpus", "must be of type integer"),
    ("bad-quantity", "job", with_(DP, roles__worker__memory="16GB"),
     "spec.roles.worker.memory", "should match"),
    ("unknown-field", "job", with_(DP, roles__worker__gpu=1),
     "spec.roles.worker.gpu", "unknown field"),
    ("name-too-long", "a" * 46, DP, "metadata.name", "at most 45 characters"),
    ("name-starts-with-digit", "1job", DP, "metadata.name", "DNS-1035 label"),
    ("max-backoff-below-backoff", "job",
     with_(DP, runPolicy={"backoffSeconds": 60, "maxBackoffSeconds": 30}),
     "spec.runPolicy.maxBackoffSeconds", "at least runPolicy.backoffSeconds"),
    ("gpu-resource-not-extended", "job",
     with_(DP, roles__worker__gpuResource="kubernetes.io/gpu"), "spec.roles.worker.gpuResource",
     "must be an extended resource name"),
    ("cpu-as-extended-resource", "job",
     with_(DP, roles__worker__extendedResources={"cpu": "4"}),
     "spec.roles.worker.extendedResources", "keys must be extended resource names"),
    ("gpu-as-extended-resource", "job",
     with_(DP, roles__worker__extendedResources={"nvidia.com/gpu": 1}),
     "spec.roles.worker.extendedResources", "must not list gpuResource"),
    ("port-out-of-range", "job", with_(DP, network={"masterPort": 80}),
     "spec.network.masterPort", "should be greater than or equal to 1024"),
    # tf.distribute aliases are held to their target's rules (aliases.py).
    ("mirrored-with-ps", "job", with_(DP, strategy__type="MirroredStrategy", roles__ps={}),
     "spec.roles.ps", "only allowed with strategy ParameterServer, not MirroredStrategy"),
    ("multi-worker-mirrored-batch-smaller-than-workers", "job",
     with_(DP, strategy__type="MultiWorkerMirroredStrategy", roles__worker={"replicas": 3},
           trainer={"batchSize": 2}),
     "spec.trainer.batchSize", "must be at least the worker processes"),
    ("central-storage-with-stages", "job",
     {"strategy": {"type": "CentralStorageStrategy"}, "roles": {"stage": {"replicas": 2}}},
     "spec.roles.worker", "required for strategy CentralStorageStrategy"),
    ("tf-parameter-server-without-ps", "job",
     with_(DP, strategy__type="ParameterServerStrategy"),
     "spec.roles.ps", "required for strategy ParameterServer in mode Async"),
    ("tf-parameter-server-with-a-mode", "job",
     {"strategy": {"type": "ParameterServerStrategy", "parameterServer": {"mode": "Sync"}},
      "roles": {"worker": {"replicas": 2}, "ps": {}}},
     "spec.strategy.parameterServer", "not allowed with strategy ParameterServerStrategy"),
    # ParameterServer mode EASGDRoundRobin: one master, at least 2 workers taking turns.
    ("round-robin-without-ps", "job",
     with_(DP, strategy={"type": "ParameterServer",
                         "parameterServer": {"mode": "EASGDRoundRobin"}}),
     "spec.roles.ps", "required for strategy ParameterServer in mode EASGDRoundRobin"),
    ("round-robin-two-ps", "job",
     {"strategy": {"type": "ParameterServer", "parameterServer": {"mode": "EASGDRoundRobin"}},
      "roles": {"worker": {"replicas": 2}, "ps": {"replicas": 2}}},
     "spec.roles.ps", "exactly 1 ps process"),
    ("round-robin-one-worker", "job",
     {"strategy": {"type": "ParameterServer", "parameterServer": {"mode": "EASGDRoundRobin"}},
      "roles": {"worker": {"replicas": 1}, "ps": {}}},
     "spec.roles.worker", "at least 2 worker processes"),
    ("failure-rule-without-matcher", "job",
     with_(DP, runPolicy={"podFailurePolicy": {"rules": [{"action": "Ignore"}]}}),
     "spec.runPolicy.podFailurePolicy.rules[0]",
     "exactly one of onExitCodes and onPodConditions"),
    ("failure-rule-unknown-action", "job",
     with_(DP, runPolicy={"podFailurePolicy": {"rules": [
         {"action": "Retry", "onExitCodes": {"operator": "In", "values": [3]}}]}}),
     "spec.runPolicy.podFailurePolicy.rules[0].action", 'Unsupported value: "Retry"'),
]  # fmt: skip


@pytest.mark.parametrize(("name", "spec", "field", "words"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])  # fmt: skip
def test_malformed_job_is_refused_naming_the_field(
    jobs: client.CustomObjectsApi, namespace: str, name: str, spec: dict[str, Any], field: str,
    words: str,
) -> None:  # fmt: skip
    message = refusal(lambda: create(jobs, namespace, manifest(spec, name)))
    assert field in message, message
    assert words in message, message
    # The operator's backstop blames the same field.
    assert field in {e.field for e in validate_job(spec, name=name)}


def test_bundled_trainer_rules_spare_a_custom_command(
    jobs: client.CustomObjectsApi, namespace: str
) -> None:
    # 12 pods x 8 GPUs = 96 worker processes, more than the default batchSize 64: the
    # bundled trainer cannot run it, a custom command never splits that batch.
    bundled = with_(DP, roles__worker={"replicas": 12, "gpus": 8})
    message = refusal(lambda: create(jobs, namespace, manifest(bundled)))
    assert "spec.trainer.batchSize" in message and "worker processes" in message, message
    custom = with_(bundled, trainer__command=["torchrun", "train.py"])
    accepted = create(jobs, namespace, manifest(custom))
    assert accepted["spec"]["trainer"]["batchSize"] == 64
    assert validate_job(custom) == []


@pytest.mark.parametrize(
    "path",
    sorted(EXAMPLES.glob("*.yaml")) + sorted(EXAMPLES.glob("cpu/*.yaml")),
    ids=lambda p: str(p.relative_to(EXAMPLES)),
)
def test_example_is_accepted_and_defaulted_like_the_models(
    jobs: client.CustomObjectsApi, namespace: str, path: Path
) -> None:
    doc = load_job(path)  # the job, without the ConfigMap a manifest may carry along
    stored = create(jobs, namespace, doc)
    # The server's defaults (from the CRD) are exactly the models' defaults.
    assert stored["spec"] == DistributedTrainingJobSpec.model_validate(doc["spec"]).to_api()


@pytest.fixture
def existing(jobs: client.CustomObjectsApi, namespace: str) -> Iterator[dict[str, Any]]:
    spec = with_(DP, priorityClassName=None, runPolicy={"backoffLimit": 3})
    yield create(jobs, namespace, manifest(spec, "running-job"), dry_run=False)


def patch(jobs: client.CustomObjectsApi, job: dict[str, Any], spec: dict[str, Any]) -> Any:
    meta = job["metadata"]
    return jobs.patch_namespaced_custom_object(
        GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"spec": spec}
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"roles": {"worker": {"replicas": 4}}}, "spec.roles"),
        ({"strategy": {"type": "FSDP"}}, "spec.strategy"),
        ({"trainer": {"batchSize": 32}}, "spec.trainer"),
        ({"checkpoint": {"everySteps": 5}}, "spec.checkpoint"),
        ({"network": {"masterPort": 29501}}, "spec.network"),
        ({"priorityClassName": "high"}, "spec.priorityClassName"),
        ({"runPolicy": {"backoffLimit": 9}}, "spec.runPolicy.backoffLimit"),
        ({"runPolicy": {"cleanPodPolicy": "All"}}, "spec.runPolicy.cleanPodPolicy"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_changing_an_immutable_field_is_refused(
    jobs: client.CustomObjectsApi, existing: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    message = refusal(lambda: patch(jobs, existing, change))
    assert f"{field}: Forbidden: is immutable after creation" in message, message


def test_suspend_ttl_and_deadline_may_change(
    jobs: client.CustomObjectsApi, existing: dict[str, Any]
) -> None:
    changed = patch(
        jobs,
        existing,
        {
            "suspend": True,
            "runPolicy": {"ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 600},
        },
    )
    assert changed["spec"]["suspend"] is True
    assert changed["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 60
    assert changed["spec"]["runPolicy"]["activeDeadlineSeconds"] == 600
    resumed = patch(
        jobs, existing, {"suspend": False, "runPolicy": {"activeDeadlineSeconds": None}}
    )
    assert resumed["spec"]["suspend"] is False
    assert "activeDeadlineSeconds" not in resumed["spec"]["runPolicy"]


def test_status_subresource_and_printer_columns(
    jobs: client.CustomObjectsApi, existing: dict[str, Any]
) -> None:
    meta = existing["metadata"]
    status = {
        "strategy": "DataParallel",
        "phase": "Running",
        "ready": "2/2",
        "progress": {"step": 40, "loss": 0.25, "lossShort": "0.2500"},
        "elastic": {"replicas": 2, "minReplicas": 1, "maxReplicas": 4, "resizes": 0},
    }
    jobs.patch_namespaced_custom_object_status(
        GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": status}
    )
    # A status written through the main resource is ignored: only /status changes it.
    jobs.patch_namespaced_custom_object(
        GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": {"phase": "Failed"}}
    )
    stored = jobs.get_namespaced_custom_object(
        GROUP, VERSION, meta["namespace"], PLURAL, meta["name"]
    )
    assert stored["status"]["phase"] == "Running"
    assert stored["status"]["restarts"] == 0  # defaulted by the server from the model
    table = table_of(jobs, meta["namespace"], meta["name"])
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == [
        "Name", "Strategy", "Phase", "Ready", "Size", "Queue", "Step", "Loss", "Reason",
        "Domain", "Age"
    ]  # fmt: skip
    (row,) = table["rows"]
    assert row["cells"][:8] == [
        "running-job", "DataParallel", "Running", "2/2", 2, None, 40, "0.2500"
    ]  # fmt: skip


def table_of(jobs: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    """What `kubectl get dtj <name>` asks for: the server-side Table."""
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    return jobs.get_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, namespace, PLURAL, name, _headers={"Accept": accept}
    )


def test_short_name_and_category_are_served(jobs: client.CustomObjectsApi) -> None:
    resources = jobs.get_api_resources(GROUP, VERSION).resources
    (dtj,) = [r for r in resources if r.name == PLURAL]
    assert dtj.short_names == ["dtj"] and dtj.categories == ["dtjob"]


@pytest.mark.parametrize(
    ("alias", "roles", "runs"),
    [
        ("MirroredStrategy", {"worker": {"replicas": 1, "gpus": 2}}, "DataParallel"),
        ("MultiWorkerMirroredStrategy", {"worker": {"replicas": 2}}, "DataParallel"),
        ("CentralStorageStrategy", {"worker": {"replicas": 1}}, "CPUOffload"),
        ("ParameterServerStrategy", {"worker": {"replicas": 2}, "ps": {}}, "ParameterServer"),
    ],
)
def test_tf_alias_is_accepted_and_its_column_shows_what_runs(
    jobs: client.CustomObjectsApi, namespace: str, alias: str, roles: dict[str, Any], runs: str
) -> None:
    name = f"tf-{alias.lower()}"
    job_manifest = manifest({"strategy": {"type": alias}, "roles": roles}, name)
    stored = create(jobs, namespace, job_manifest, dry_run=False)
    assert stored["spec"]["strategy"]["type"] == alias  # the manifest keeps what was written
    # The operator's status for it (status.strategy, from the resolved spec) fills the column.
    job = Job.from_object(stored)
    decision = StatusDecision(phase=JobPhase.PENDING)
    now = datetime.now(UTC)
    status = compute_status({}, job.spec, decision, now=now, observed_generation=1, progress=None)
    assert status["strategy"] == runs
    jobs.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": status}
    )
    (row,) = table_of(jobs, namespace, name)["rows"]
    assert row["cells"][:3] == [name, runs, "Pending"]
