"""The metric names a PromQL expression reads, and the names the operator exports: enough
of PromQL's grammar to tell metric names from functions, keywords, labels and durations,
so dashboards and alert rules can be held to the metrics that exist."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

# What a metric family of each type exposes (prometheus_client's text format).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
}
KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "atan2",
    "group_left",
    "group_right",
}
# Label lists of grouping and vector-matching modifiers: `by (le, namespace)`.
MODIFIER = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENT = re.compile(r"(?<![\w$.:])[a-zA-Z_:][\w:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names in `expr` (Grafana's `$variables` and `label_values(m, label)` too)."""
    text = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges, subqueries
    text = re.sub(r"\blabel_values\(\s*([\w:]+)\s*,[^)]*\)", r" \1 ", text)
    text = MODIFIER.sub(" ", text)
    names = set()
    for match in IDENT.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in KEYWORDS:
            continue  # a function or aggregation, or an operator word
        names.add(match.group())
    return names


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every series name the registry's metric families expose, labelled or not."""
    return {
        family.name + suffix
        for family in registry.collect()
        for suffix in SUFFIXES.get(family.type, ("",))
    }
