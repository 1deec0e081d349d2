#!/usr/bin/env python3
"""Writes docs/api-reference.md from the generated CRD (crds/*.yaml): every field path with
its type, bounds, default and description, then the validation rules the API server applies.

The CRD is generated from dtjob_api's models, so this page is too; `make crds` runs this
script, and tests/unit/operator/test_api_reference.py fails when the committed page drifts.
Fields typed by Kubernetes itself (the pod template's `spec`, `tolerations`, `volumes`...)
are listed once, not expanded: their schema is core/v1's, documented by `kubectl explain`.

Usage: hack/api_reference.py [OUT]      (default docs/api-reference.md)
       hack/api_reference.py --check    (exit 1 when the committed page is stale)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "api-reference.md"

Node = dict[str, Any]


def load_crds() -> list[Node]:
    # The C loader when PyYAML has it: the CRD is ~800 KB of YAML.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [yaml.load(p.read_text(), Loader=loader) for p in sorted((REPO / "crds").glob("*.yaml"))]


def documented(node: Node) -> bool:
    """Whether the fields below `node` are ours (they carry docstrings); below a core/v1 type
    they have none, and the reference stops there."""
    return any(child.get("description") for child in node.get("properties", {}).values())


def fields(node: Node, path: str = "") -> Iterator[tuple[str, Node, bool]]:
    """(path, schema, required) of every documented field, depth first in schema order;
    `[]` marks the items of a list, `{}` the values of a map."""
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        yield here, child, name in required
        if documented(child):
            yield from fields(child, here)
        for suffix, inner in (
            ("[]", child.get("items")),
            ("{}", child.get("additionalProperties")),
        ):
            if isinstance(inner, dict) and documented(inner):
                yield from fields(inner, here + suffix)


def is_core(node: Node) -> bool:
    """An object (or list of objects) whose fields are Kubernetes' own, without our docs."""
    inner = [node, node.get("items") or {}]
    return any("properties" in n for n in inner) and not any(documented(n) for n in inner)


def type_of(node: Node) -> str:
    """The field's type with its bounds, as a reader wants them."""
    if node.get("x-kubernetes-int-or-string"):
        kind = "quantity (integer or string)"
    elif node.get("type") == "array":
        kind = f"array of {type_of(node.get('items') or {})}"
    elif node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        kind = f"map of {type_of(node['additionalProperties'])}"
    else:
        kind = node.get("type", "object")
    limits = []
    if "enum" in node:
        limits.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, word in (("minimum", ">"), ("maximum", "<")):
        if key in node:
            exclusive = node.get(f"exclusive{key[:1].upper()}{key[1:]}") is True
            limits.append(f"{word}{'' if exclusive else '='} {node[key]}")
    for key, word in (("minLength", "length >="), ("maxLength", "length <="),
                      ("minItems", "items >="), ("maxItems", "items <="),
                      ("maxProperties", "entries <=")):  # fmt: skip
        if key in node:
            limits.append(f"{word} {node[key]}")
    if "pattern" in node and "x-kubernetes-int-or-string" not in node:
        limits.append("pattern")
    return kind + (f" ({'; '.join(limits)})" if limits else "")


def default_of(node: Node) -> str:
    if "default" not in node:
        return ""
    value = node["default"]
    if isinstance(value, dict) and value:
        return "see fields"  # an object default: each field below carries its own
    return f"`{json.dumps(value)}`"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rules(root: Node) -> list[tuple[str, str]]:
    """(field, message) of every CEL rule, the field being where the API server reports it."""
    found = []
    for path, node, _ in [("", root, False), *fields(root)]:
        for rule in node.get("x-kubernetes-validations", []):
            where = path + rule.get("fieldPath", "")
            found.append((where or "(the object)", rule.get("message") or _words(rule)))
    return found


def _words(rule: Node) -> str:
    """A message expression read aloud: its string literals, and <field> for the rest."""
    parts = str(rule["messageExpression"]).split(" + ")
    return "".join(json.loads(p) if p.startswith('"') else _placeholder(p) for p in parts)


def _placeholder(expression: str) -> str:
    for field in ("strategy.type", "parameterServer.mode", "pipeline.schedule"):
        if field in expression:
            return f"<spec.strategy.{field.removeprefix('strategy.')}>"
    return "<value>"


def render(crds: list[Node]) -> str:
    out = [
        "# API reference",
        "",
        "GENERATED by `make crds` (hack/api_reference.py) from the CRD in `crds/`, itself "
        "generated from `api/dtjob_api`: do not edit. [api.md](api.md) is the overview.",
        "",
    ]
    for crd in crds:
        names = crd["spec"]["names"]
        for version in crd["spec"]["versions"]:
            root = version["schema"]["openAPIV3Schema"]
            out += [
                f"## {names['kind']} ({crd['spec']['group']}/{version['name']})",
                "",
                f"Plural `{names['plural']}`, short names "
                + ", ".join(f"`{s}`" for s in names.get("shortNames", []))
                + f", scope {crd['spec']['scope']}. Fields marked *core/v1* take Kubernetes' "
                "own schema (`kubectl explain` documents them).",
                "",
                "| field | type | default | description |",
                "| --- | --- | --- | --- |",
            ]
            for path, node, required in fields(root):
                kind = type_of(node) + (", required" if required else "")
                if is_core(node):
                    kind += ", *core/v1*"
                row = [f"`{path}`", kind, default_of(node), node.get("description", "")]
                out.append("| " + " | ".join(cell(c) for c in row) + " |")
            out += [
                "",
                "### Validation rules",
                "",
                "Checked by the API server on create and update (CEL); the message is what "
                "`kubectl apply` prints.",
                "",
                "| field | message |",
                "| --- | --- |",
            ]
            out += [f"| `{cell(where)}` | {cell(message)} |" for where, message in rules(root)]
            out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = render(load_crds())
    if argv[:1] == ["--check"]:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(REPO)} is stale: run `make crds`", file=sys.stderr)
            return 1
        return 0
    target = Path(argv[0]) if argv else OUT
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
