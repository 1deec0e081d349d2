"""Writes the values table of charts/dtjob-operator/README.md from values.yaml's `# --`
comments (helm-docs style) and the allowed values from values.schema.json, between the
README's `<!-- values:begin -->` and `<!-- values:end -->` markers.

    python hack/chart_values_table.py           # rewrite the table (`make chart-docs`)
    python hack/chart_values_table.py --check   # exit 1 if the README's table is stale

tests/unit/operator/test_chart.py runs the check, so the table never drifts from values.yaml.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "dtjob-operator"
BEGIN, END = "<!-- values:begin -->", "<!-- values:end -->"
KEY = re.compile(r"^(\s*)([A-Za-z]\w*):")


def documented_values(text: str) -> list[tuple[str, str]]:
    """(dotted path, description) of every key with a `# --` comment, in file order."""
    rows: list[tuple[str, str]] = []
    parents: list[tuple[int, str]] = []  # (indentation, key) of the enclosing keys
    doc: list[str] | None = None  # the `# --` comment above the current line, if any
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            doc = [stripped.removeprefix("# --").strip()]
            continue
        if stripped.startswith("#"):
            if doc is not None:
                doc.append(stripped.removeprefix("#").strip())
            continue
        key = KEY.match(line)
        if key:
            indent = len(key.group(1))
            parents = [(i, k) for i, k in parents if i < indent] + [(indent, key.group(2))]
            if doc is not None:
                rows.append((".".join(k for _, k in parents), " ".join(doc)))
        doc = None
    return rows


def lookup(tree: Any, path: str) -> Any:
    for key in path.split("."):
        tree = tree[key]
    return tree


def allowed(node: dict[str, Any] | None) -> str:
    """What the schema accepts, in a few words: `integer 1-64`, `builtin, external`."""
    if node is None:
        return ""
    if "enum" in node:
        return ", ".join(f"`{v}`" if v != "" else '`""`' for v in node["enum"])
    kind = node.get("type", "")
    kind = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "object" and "properties" not in node:
        kind = "map" if "additionalProperties" in node else "object (Kubernetes type)"
    if "minimum" in node and "maximum" in node:
        return f"{kind} {node['minimum']}-{node['maximum']}"
    signs = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<="}
    bounds = [f"{sign} {node[k]}" for k, sign in signs.items() if k in node]
    if "pattern" in node:
        bounds.append("(pattern)")
    return " ".join([kind, *bounds])


def schema_node(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for key in path.split("."):
        node = (node or {}).get("properties", {}).get(key)
    return node


def table() -> str:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = ["| value | allowed | default | description |", "| --- | --- | --- | --- |"]
    for path, description in documented_values(text):
        default = json.dumps(lookup(values, path), separators=(", ", ": "))
        cells = [f"`{path}`", allowed(schema_node(schema, path)), f"`{default}`", description]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def main() -> int:
    readme = CHART / "README.md"
    text = readme.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    wanted = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if "--check" in sys.argv[1:]:
        if wanted != text:
            print(f"{readme}: the values table is stale; run `make chart-docs`", file=sys.stderr)
            return 1
        return 0
    readme.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
