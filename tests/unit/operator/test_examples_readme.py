"""examples/README.md lists every GPU example with its strategy, the GPUs its whole gang
needs and its CPU twin, as the manifests say."""

from __future__ import annotations

import re
from typing import Any

from unit.operator.test_chart import REPO

from helpers.examples import load_job

EXAMPLES = REPO / "examples"


def gang_gpus(job: dict[str, Any]) -> int:
    total = 0
    for role in job["spec"]["roles"].values():
        groups = role.get("groups") or [role]
        total += sum(g.get("replicas", 1) * g.get("gpus", 0) for g in groups)
    return total


def table() -> dict[str, tuple[str, int, str]]:
    """manifest -> (strategy cell, GPUs, CPU twin) from the README's table."""
    row = re.compile(
        r"^\| \[`([\w.-]+)`\]\([\w.-]+\) \| ([^|]+) \| (\d+) \| [^|]+ \| \[`([\w./-]+)`\]"
    )
    rows = {}
    for line in (EXAMPLES / "README.md").read_text().splitlines():
        if match := row.match(line):
            rows[match[1]] = (match[2].strip(), int(match[3]), match[4])
    return rows


def test_every_example_is_listed_with_its_strategy_gpus_and_cpu_twin() -> None:
    rows = table()
    manifests = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    assert sorted(rows) == manifests
    for name in manifests:
        job = load_job(EXAMPLES / name)
        strategy, gpus, twin = rows[name]
        assert strategy.split(" (")[0] == job["spec"]["strategy"]["type"], name
        assert gpus == gang_gpus(job), name
        assert (EXAMPLES / twin).exists() and gang_gpus(load_job(EXAMPLES / twin)) == 0


def test_the_total_the_readme_warns_about_is_right() -> None:
    total = sum(gang_gpus(load_job(p)) for p in EXAMPLES.glob("*.yaml"))
    count = len(list(EXAMPLES.glob("*.yaml")))
    text = (EXAMPLES / "README.md").read_text()
    assert re.search(rf"{count} jobs asking for\s+{total} GPUs", text)
