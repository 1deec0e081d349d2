"""The generated CRD: committed copies match the models, the schema is structural, and the
rules are wired to fields that exist."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dtjob_api import StrategyType, crd, rules
from dtjob_api.status import JobPhase

REPO = Path(__file__).resolve().parents[3]
COMMITTED = [
    REPO / "crds" / "dtjob.io_distributedtrainingjobs.yaml",
    REPO / "charts" / "dtjob-operator" / "files" / "crds" / "dtjob.io_distributedtrainingjobs.yaml",
]
# Template fields whose schema is the real core/v1 one (coreschema.py): the field itself
# has our docstring, what is below it has core/v1's types without descriptions.
CORE_FIELDS = ("spec", "affinity", "tolerations", "volumes", "volumeMounts", "env")
CORE_PREFIXES = tuple(
    f"spec.roles.{role}.template.{field}"
    for role in ("worker", "ps", "stage")
    for field in CORE_FIELDS
)


def inside_core_type(path: str) -> bool:
    return any(path.startswith(prefix) and path != prefix for prefix in CORE_PREFIXES)


@pytest.fixture(scope="module")
def generated() -> dict[str, Any]:
    return crd.crd()


@pytest.fixture(scope="module")
def root(generated: dict[str, Any]) -> dict[str, Any]:
    return generated["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with a readable path (`[]` for list items, `{}` for map values)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def at(root: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = root
    for name in dotted.split("."):
        node = node["properties"][name]
    return node


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_crd_matches_the_models(path: Path) -> None:
    assert path.exists(), f"{path} is missing: run `make crds`"
    assert path.read_text() == crd.render(), f"{path} is stale: run `make crds` and commit"


def test_crd_identity(generated: dict[str, Any]) -> None:
    spec = generated["spec"]
    assert generated["metadata"]["name"] == "distributedtrainingjobs.dtjob.io"
    assert spec["group"] == "dtjob.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "DistributedTrainingJob"
    assert spec["names"]["plural"] == "distributedtrainingjobs"
    assert spec["names"]["shortNames"] == ["dtj"]
    assert spec["names"]["categories"] == ["dtjob"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_printer_columns(generated: dict[str, Any]) -> None:
    columns = {
        c["name"]: (c["type"], c["jsonPath"])
        for c in generated["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert columns == {
        "Strategy": ("string", ".status.strategy"),
        "Phase": ("string", ".status.phase"),
        "Size": ("integer", ".status.elastic.replicas"),
        "Ready": ("string", ".status.ready"),
        "Queue": ("integer", ".status.queuePosition"),
        "Step": ("integer", ".status.progress.step"),
        "Loss": ("string", ".status.progress.lossShort"),
        "Reason": ("string", ".status.reason"),
        "Domain": ("string", ".status.admission.domain"),
        "Age": ("date", ".metadata.creationTimestamp"),
    }
    wide = [c["name"] for c in generated["spec"]["versions"][0]["additionalPrinterColumns"]
            if c.get("priority")]  # fmt: skip
    assert wide == ["Domain"]  # only `kubectl get -o wide` shows it


def test_schema_is_structural(root: dict[str, Any]) -> None:
    for path, node in walk(root, ""):
        assert "$ref" not in node and "$defs" not in node, path
        assert "title" not in node, path
        assert node.get("type") != "null", path
        assert node.get("additionalProperties") is not False, path
        if "anyOf" in node:
            # The only union a structural schema allows: int-or-string (quantities).
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert "type" not in node, path
        elif path != "metadata":
            assert node.get("type") in {
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            }, path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(bound, True) is True, f"{path}: OpenAPI v3 wants a boolean {bound}"


def test_metadata_is_left_to_the_server(root: dict[str, Any]) -> None:
    assert root["properties"]["metadata"] == {"type": "object"}
    assert root["required"] == ["spec"]


def test_every_property_has_a_description(root: dict[str, Any]) -> None:
    missing = [
        path
        for path, node in walk(root, "")
        if path
        and path != "metadata"
        and not path.endswith(("[]", "}"))
        and not inside_core_type(path)
        and not node.get("description")
    ]
    assert not missing, f"fields without a docstring: {missing}"
    # Docstrings are re-flowed to one line; kubectl explain wraps them itself.
    assert all("\n" not in n.get("description", "") for _, n in walk(root, ""))


# The factories' keyword arguments: free-form by nature, bounded by maxProperties in the
# schema and by bytes and depth in the operator's validation (trainer_spec.py).
FREE_FORM = {"spec.trainer.model.kwargs", "spec.trainer.dataset.kwargs"}


def test_nothing_is_free_form(root: dict[str, Any]) -> None:
    # A free-form object is neither checked nor bounded: 2,000 levels of nesting in one
    # crashed the operator's watch. Every object has properties or typed values, but for
    # the factories' kwargs.
    for path, node in walk(root, ""):
        if path in FREE_FORM:
            assert node["maxProperties"] <= 64 and node["x-kubernetes-preserve-unknown-fields"]
            continue
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        if node.get("type") == "object" and path != "metadata":
            assert "properties" in node or "additionalProperties" in node, path


def test_the_template_carries_the_real_core_schema(root: dict[str, Any]) -> None:
    template = at(root, "spec.roles.worker.template")
    pod = template["properties"]["spec"]
    assert pod["description"] and pod["nullable"] is True
    container = pod["properties"]["containers"]["items"]
    assert container["required"] == ["name"]
    assert pod["properties"]["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    assert "required" not in pod  # the operator adds the trainer container
    assert "ephemeralContainers" not in pod["properties"]
    assert {"imagePullSecrets", "initContainers", "serviceAccountName", "securityContext"} <= set(
        pod["properties"]
    )
    port = container["properties"]["ports"]["items"]["properties"]
    assert port["protocol"]["default"] == "TCP"  # a map-list key: required or defaulted
    toleration = template["properties"]["tolerations"]["items"]["properties"]
    assert toleration["operator"]["enum"] == ["", "Exists", "Equal"]
    limits = container["properties"]["resources"]["properties"]["limits"]
    assert limits["additionalProperties"]["x-kubernetes-int-or-string"] is True
    assert (
        template["properties"]["affinity"]["properties"]
        == pod["properties"]["affinity"]["properties"]
    )
    assert at(root, "spec.checkpoint.claimName")["pattern"].startswith("^[a-z0-9]")


def test_template_rules_at_apply(root: dict[str, Any]) -> None:
    texts = " ".join(v["rule"] for v in validations(at(root, "spec.roles.worker.template")))
    for needle in ("restartPolicy == 'Never'", "hostname", "subdomain", "dtjob.io/"):
        assert needle in texts
    assert "nodeName" in texts
    plain, reserved = validations(at(root, "spec.checkpoint"))
    assert "matches(" in plain["rule"]
    assert "/dev/shm" in reserved["rule"] and "/etc/dtjob" in reserved["rule"]


# The CRD is installed server-side or by the chart (docs/api.md, "Installing the CRD"): the
# 256 KiB annotation of client-side `kubectl apply` no longer bounds it (it reached it at
# 262,085 bytes of compact JSON, with the three roles' PodSpec schemas 72 % of it). The
# API server takes up to 3 MiB a request and etcd 1.5 MiB an object; this budget is far
# below both, so that growth is a decision, not an accident.
CRD_BUDGET_BYTES = 300_000


def test_the_crd_stays_within_its_budget(generated: dict[str, Any]) -> None:
    size = len(json.dumps(generated, separators=(",", ":")))
    assert size < CRD_BUDGET_BYTES, f"{size} bytes: over the CRD's budget (docs/api.md)"


def test_optional_fields_are_nullable_and_required_ones_listed(root: dict[str, Any]) -> None:
    worker = at(root, "spec.roles.worker")
    assert worker["nullable"] is True and worker["type"] == "object"
    assert at(root, "spec.roles.worker.procsPerPod") == {
        "description": at(root, "spec.roles.worker.procsPerPod")["description"],
        "type": "integer",
        "nullable": True,
        "minimum": 1,
        "maximum": 64,
    }
    assert at(root, "spec")["required"] == ["strategy", "roles"]
    assert "nullable" not in at(root, "spec.roles.worker.gpus")


def test_types_enums_and_bounds(root: dict[str, Any]) -> None:
    gpus = at(root, "spec.roles.worker.gpus")
    assert gpus["type"] == "integer" and gpus["minimum"] == 0  # 0.5 GPUs is refused
    assert at(root, "spec.strategy.parameterServer.rho")["type"] == "number"
    assert at(root, "spec.strategy.type")["enum"] == [s.value for s in StrategyType]
    assert at(root, "status.phase")["enum"] == [p.value for p in JobPhase]
    test_fraction = at(root, "spec.trainer.dataset.testFraction")
    assert test_fraction["minimum"] == 0.0 and test_fraction["exclusiveMinimum"] is True
    assert test_fraction["maximum"] == 1.0 and test_fraction["exclusiveMaximum"] is True
    labels = at(root, "spec.roles.worker.template.labels")
    assert labels["additionalProperties"] == {"type": "string"} and labels["maxProperties"] == 64
    cpu = at(root, "spec.roles.worker.cpu")
    assert re.match(cpu["pattern"], "500m") and not re.match(cpu["pattern"], "1.2.3")


def test_defaults_let_the_server_fill_in_the_stored_object(root: dict[str, Any]) -> None:
    assert at(root, "spec.strategy.backend")["default"] == "auto"
    assert at(root, "spec.roles.worker.replicas")["default"] == 1
    assert at(root, "spec.suspend")["default"] is False
    trainer = at(root, "spec.trainer")["default"]
    assert trainer["batchSize"] == 64 and trainer["model"]["hiddenSizes"] == [64, 64, 64]
    assert at(root, "spec.runPolicy")["default"]["restartPolicy"] == "ExitCode"
    assert at(root, "status.phase")["default"] == "Pending"
    assert "default" not in at(root, "spec.roles.worker.procsPerPod")  # None is "absent"


def validations(node: dict[str, Any]) -> list[dict[str, Any]]:
    return node.get("x-kubernetes-validations", [])  # type: ignore[no-any-return]


def test_cross_field_rules_point_at_real_fields(root: dict[str, Any]) -> None:
    spec = at(root, "spec")
    cross = [v for v in validations(spec) if "oldSelf" not in v["rule"]]
    assert len(cross) == len(rules.RULES)
    for v in cross:
        at(spec, v["fieldPath"].lstrip("."))  # KeyError if the path does not exist
        assert (v.get("message") or v.get("messageExpression")) and v["reason"] in {
            "FieldValueInvalid",
            "FieldValueRequired",
            "FieldValueForbidden",
        }
        # Numbers in a messageExpression make the server's cost estimate explode.
        assert "string(" not in v.get("messageExpression", "")
    for path, node in walk(root, ""):
        texts = [v["rule"] for v in validations(node)]
        assert len(texts) == len(set(texts)), f"{path}: rules are keyed by their text"


def test_immutability_rules_cover_all_but_the_mutable_fields(root: dict[str, Any]) -> None:
    spec = at(root, "spec")
    fixed = {v["fieldPath"] for v in validations(spec) if "oldSelf" in v["rule"]}
    assert fixed == {f".{f}" for f in spec["properties"]} - {".suspend", ".runPolicy"}
    run_policy = at(spec, "runPolicy")
    fixed_rp = {v["fieldPath"] for v in validations(run_policy) if "oldSelf" in v["rule"]}
    assert fixed_rp == {f".{f}" for f in run_policy["properties"]} - {
        ".ttlSecondsAfterFinished",
        ".activeDeadlineSeconds",
        ".progressDeadlineSeconds",
        ".stallPolicy",
    }
    # An optional field may appear or disappear: that must count as a change too.
    pcn = next(v["rule"] for v in validations(spec) if v["fieldPath"] == ".priorityClassName")
    assert "has(self.priorityClassName) == has(oldSelf.priorityClassName)" in pcn


def test_name_rules(root: dict[str, Any]) -> None:
    texts = [v["rule"] for v in validations(root)]
    assert "self.metadata.name.size() <= 45" in texts
    assert any(rules.NAME_PATTERN in t for t in texts)


def test_message_expression_is_the_message_in_cel() -> None:
    rule = next(r for r in rules.RULES if r.field == "roles.ps" and "ParameterServer" in r.cel)
    expression = rule.message_expression()
    assert expression is not None and expression.startswith('"only allowed')
    assert expression.endswith("+ self.strategy.type")
    assert rule.static_message() == (
        "only allowed with strategy ParameterServer, not <spec.strategy.type>"
    )
