"""Which failed tests of a `make test` may run again alone, and as what.

    python3 hack/failed_tests.py [--reports .test-reports] [--most 4]

hack/test-lanes.sh calls it when a lane failed. It reads the lanes' exit codes (phases.tsv,
hack/timed.sh) and each tier's junit XML, and writes `rerun/<tier>.args` (pytest node ids, one
a line, for `pytest @file`) for each tier to run again: unit and unit-helper as `unit`,
integration and integration-2 as `integration`, `e2e`. Exits 0 when every failed lane
failed only by tests it names, and they are few (`--most`); else 1, saying why: a lane
that failed before or beside its tests (a broken build, a collection error, the GPU
rehearsal's script), or more failures than a loaded machine explains, is a failure as it
stands. Standard library only.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# The lane steps whose failures may be tests run again, and the tier that runs them again.
RERUN_AS = {
    "unit": "unit",
    "unit-helper": "unit",
    "integration": "integration",
    "integration-2": "integration",
    "e2e": "e2e",
}


def node_id(case: ET.Element) -> str | None:
    """The pytest node id of a junit (xunit1) test case: file, classes, name."""
    file, classname, name = case.get("file"), case.get("classname", ""), case.get("name", "")
    if not file or not name:
        return None
    module = file[: -len(".py")].replace("/", ".")
    classes = classname[len(module) :].strip(".").split(".") if classname != module else []
    return "::".join([file, *[c for c in classes if c], name])


def failed_ids(xml: Path) -> list[str] | None:
    """The failed tests of one tier, or None when one of them has no node id."""
    ids = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        found = node_id(case)
        if found is None:
            return None
        ids.append(found)
    return ids


def failed_steps(phases: Path) -> list[str]:
    steps = []
    for line in phases.read_text().splitlines():
        name, _seconds, rc, *_ = line.split("\t")
        if name.startswith("lane:") and rc != "0":
            steps.append(name[len("lane:") :])
    return steps


def plan(reports: Path, most: int) -> tuple[dict[str, list[str]], str]:
    """{rerun tier: node ids}, and "" or why nothing may run again."""
    if not (reports / "phases.tsv").is_file():
        return {}, "no phases.tsv"
    todo: dict[str, list[str]] = {}
    for step in failed_steps(reports / "phases.tsv"):
        if step not in RERUN_AS:
            return {}, f"the {step} step failed, and it is not a pytest tier"
        xml = reports / f"{step}.xml"
        ids = failed_ids(xml) if xml.is_file() else None
        if not ids:
            return {}, f"the {step} step failed without a failed test that can run again"
        todo.setdefault(RERUN_AS[step], []).extend(ids)
    count = sum(len(v) for v in todo.values())
    if count > most:
        return {}, f"{count} tests failed: more than {most}, not a loaded machine's doing"
    return todo, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=Path, default=Path(".test-reports"))
    parser.add_argument("--most", type=int, default=4)
    args = parser.parse_args()
    todo, why = plan(args.reports, args.most)
    if why:
        print(f"make test: no second run: {why}")
        return 1
    out = args.reports / "rerun"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.args"):
        old.unlink()
    for tier, ids in todo.items():
        (out / f"{tier}.args").write_text("".join(f"{i}\n" for i in ids))
        for i in ids:
            print(f"make test: runs again alone ({tier}): {i}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
