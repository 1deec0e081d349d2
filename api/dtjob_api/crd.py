"""The DistributedTrainingJob CRD, generated from the pydantic models.

pydantic writes JSON Schema (2020-12); the API server wants a *structural* OpenAPI v3
schema. The differences are handled in one pass (`_structural`): $refs inlined, titles
dropped, `anyOf [X, null]` turned into `X` + `nullable: true`, numeric exclusive bounds
turned into OpenAPI's boolean form, `additionalProperties: false` dropped (the server prunes
or, with kubectl's strict field validation, refuses unknown fields), core/v1 types (the
pod template, marked CORE_TYPE in spec.py) replaced by their real schema from
coreschema.py, and quantities made int-or-string like the core API's. Nothing is free-form
(`x-kubernetes-preserve-unknown-fields`): every object has a schema, so the API server
checks it and bounds its nesting. The cross-field rules come from rules.py.

`python -m dtjob_api.crd [PATH]` writes the CRD as YAML (stdout without PATH);
`make crds` runs it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from dtjob_api import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, coreschema
from dtjob_api.rules import (
    IMMUTABLE_MESSAGE,
    MAX_NAME_LENGTH,
    MUTABLE_RUN_POLICY_FIELDS,
    MUTABLE_SPEC_FIELDS,
    NAME_PATTERN,
    RULES,
)
from dtjob_api.spec import DistributedTrainingJobSpec, RunPolicy
from dtjob_api.status import DistributedTrainingJobStatus
from dtjob_api.template_spec import CORE_TYPE

CATEGORIES = ["dtjob"]
PRINTER_COLUMNS: list[dict[str, Any]] = [
    # What runs, a tf.distribute alias resolved (written by the operator).
    {"name": "Strategy", "type": "string", "jsonPath": ".status.strategy"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
    # An elastic job's workers now; its bounds are in status.elastic and `kubectl dtj get`.
    {"name": "Size", "type": "integer", "jsonPath": ".status.elastic.replicas"},
    {"name": "Queue", "type": "integer", "jsonPath": ".status.queuePosition"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.progress.step"},
    # 4 significant digits: the float itself prints with 17 (status.progress.loss has it).
    {"name": "Loss", "type": "string", "jsonPath": ".status.progress.lossShort"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
    {"name": "Domain", "type": "string", "jsonPath": ".status.admission.domain", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
INT_OR_STRING = "x-kubernetes-int-or-string"
PRESERVE_UNKNOWN = "x-kubernetes-preserve-unknown-fields"
# Key order in the output, so the YAML reads description first and children last.
_KEY_ORDER = [
    "description", "type", "format", "anyOf", "enum", "default", "nullable",
    "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minLength", "maxLength",
    "pattern", "minItems", "maxItems", "minProperties", "maxProperties", INT_OR_STRING,
    "items", "required", "properties", "additionalProperties", PRESERVE_UNKNOWN,
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-validations",
]  # fmt: skip


class _CrdSchemaGenerator(GenerateJsonSchema):
    """pydantic's generator, but defaults from default_factory are written too."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            value = factory()  # type: ignore[call-arg]
            # The whole defaulted object, not {}: the server validates a default as written
            # (rules on runPolicy would see an object without its fields).
            if isinstance(value, BaseModel):
                return value.model_dump(by_alias=True, mode="json", exclude_none=True)
            return value
        return super().get_default_value(schema)


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Structural OpenAPI v3 schema of one API model."""
    raw = model.model_json_schema(
        by_alias=True, mode="validation", schema_generator=_CrdSchemaGenerator
    )
    defs = raw.pop("$defs", {})
    return _structural(raw, defs, path=model.__name__)


def _structural(node: JsonSchemaValue, defs: dict[str, Any], path: str) -> dict[str, Any]:
    node = dict(node)
    node.pop("title", None)
    if "description" in node:
        # Docstrings wrap at the source's line length; kubectl explain re-wraps anyway.
        node["description"] = " ".join(node["description"].split())
    if node.get("default", ...) is None:
        del node["default"]  # None means "absent", never a stored null
    if CORE_TYPE in node:
        # The field's docstring on top of the real core/v1 schema.
        return _finish({**coreschema.inline(node.pop(CORE_TYPE)), **node})
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        # The field's own docstring and default win over the referenced class's.
        return _finish({**_structural(target, defs, path), **node})
    if "anyOf" in node:
        # `X | None` -> X, nullable: the only union a structural schema has.
        options = node.pop("anyOf")
        others = [o for o in options if o != {"type": "null"}]
        if len(others) != 1 or len(options) != 2:
            raise ValueError(f"{path}: only `X | None` unions fit a structural schema: {options}")
        return _finish({**_structural(others[0], defs, path), **node, "nullable": True})
    if node.get("type") == "object" and node.get("additionalProperties") is True:
        raise ValueError(f"{path}: a free-form object has no structural schema; give it a type")
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    for bound, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            node[inclusive], node[bound] = node[bound], True
    if "properties" in node:
        node["properties"] = {
            name: _structural(prop, defs, f"{path}.{name}")
            for name, prop in node["properties"].items()
        }
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _structural(node[key], defs, f"{path}[]")
    return _finish(node)


def _finish(node: dict[str, Any]) -> dict[str, Any]:
    """Last touches once a node is complete (also after merging a $ref or an X | None)."""
    if node.get(INT_OR_STRING) and node.get("type") == "string":
        # A quantity: `cpu: 4` is an integer in YAML. The one anyOf a structural schema allows.
        del node["type"]
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return _ordered(node)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {k: i for i, k in enumerate(_KEY_ORDER)}
    unknown = set(node) - set(rank)
    if unknown:
        raise ValueError(f"schema keyword(s) {sorted(unknown)} not handled by crd.py")
    return dict(sorted(node.items(), key=lambda kv: rank[kv[0]]))


def _presence(field: FieldInfo, name: str) -> str:
    """CEL that `name` is unchanged, for required/defaulted and optional fields alike."""
    if field.is_required() or field.default is not None or field.default_factory is not None:
        return f"self.{name} == oldSelf.{name}"
    return (
        f"has(self.{name}) == has(oldSelf.{name}) && "
        f"(!has(self.{name}) || self.{name} == oldSelf.{name})"
    )


def _immutable_rules(model: type[BaseModel], mutable: frozenset[str]) -> list[dict[str, Any]]:
    """Transition rules (they see oldSelf, so run on update only) fixing every other field."""
    rules = []
    for name, field in model.model_fields.items():
        if name in mutable or name == "runPolicy":
            continue
        rules.append(
            {
                "rule": _presence(field, name),
                "message": IMMUTABLE_MESSAGE,
                "fieldPath": f".{name}",
                "reason": "FieldValueForbidden",
            }
        )
    return rules


def _cross_field_rules() -> list[dict[str, Any]]:
    out = []
    for rule in RULES:
        # A rule with a message expression carries no static message: the expression only
        # joins string fields the schema defaults, so it cannot fail, and the words twice
        # would cost the CRD's budget (test_crd.py).
        expression = rule.message_expression()
        entry = (
            {"rule": rule.cel, "messageExpression": expression}
            if expression
            else {"rule": rule.cel, "message": rule.static_message()}
        )
        entry |= {"fieldPath": f".{rule.field}", "reason": rule.reason}
        out.append(entry)
    return out


def spec_schema() -> dict[str, Any]:
    """Schema of .spec with the cross-field and immutability rules."""
    schema = model_schema(DistributedTrainingJobSpec)
    schema["properties"]["runPolicy"]["x-kubernetes-validations"] = _immutable_rules(
        RunPolicy, MUTABLE_RUN_POLICY_FIELDS
    )
    schema["x-kubernetes-validations"] = _cross_field_rules() + _immutable_rules(
        DistributedTrainingJobSpec, MUTABLE_SPEC_FIELDS
    )
    return schema


def _name_rules() -> list[dict[str, Any]]:
    return [
        {
            "rule": f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
            "message": f"metadata.name must be at most {MAX_NAME_LENGTH} characters: pod "
            "names <name>-<role>-<index> must fit a 63-character DNS label",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f'self.metadata.name.matches("{NAME_PATTERN}")',
            "message": "metadata.name must be a DNS-1035 label: lowercase letters, digits and "
            "'-', starting with a letter and ending with a letter or digit (it names the job's "
            "Service)",
            "reason": "FieldValueInvalid",
        },
    ]


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition object."""
    root = {
        "description": "DistributedTrainingJob runs one multi-process training job: a "
        "parallelism strategy, the pods of each role and the trainer they run.",
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "description": "APIVersion of this object: dtjob.io/v1alpha1.",
                "type": "string",
            },
            "kind": {
                "description": "Kind of this object: DistributedTrainingJob.",
                "type": "string",
            },
            # metadata is the server's: a structural schema may only say it is an object.
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": model_schema(DistributedTrainingJobStatus),
        },
        "x-kubernetes-validations": _name_rules(),
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": CATEGORIES,
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def render() -> str:
    """The CRD as YAML, the exact text of crds/dtjob.io_distributedtrainingjobs.yaml."""
    header = "# GENERATED by `make crds` from api/dtjob_api: do not edit.\n"
    # Through JSON first: nodes shared by the roles (RoleSpec's rules) would otherwise be
    # written once with YAML anchors and aliases.
    tree = json.loads(json.dumps(crd()))
    body = yaml.safe_dump(tree, sort_keys=False, width=100, allow_unicode=True)
    return header + body


def main(argv: list[str]) -> int:
    """Write the CRD to argv[0], or to stdout."""
    text = render()
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
