"""The timing summary of `make test` (hack/test_durations.py) counts the side-by-side lanes
once: their steps are shown under "lanes" but the total is the wall time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HACK = Path(__file__).resolve().parents[2] / "hack" / "test_durations.py"


def load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("test_durations_script", HACK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lane_steps_are_listed_under_lanes_and_not_added_to_the_total(tmp_path: Path) -> None:
    rows = [("lint", 6), ("lane:unit", 1500), ("lane:integration", 1200), ("lanes", 1554)]
    (tmp_path / "phases.tsv").write_text("".join(f"{n}\t{s}\t0\n" for n, s in rows))
    script = load()
    lines = script.summary(script.report(tmp_path, top=5)).splitlines()
    names = [line.split()[0] for line in lines[1:5]]
    assert names == ["lint", "lanes", "unit", "integration"]
    assert lines[3].startswith("    unit")  # indented under "lanes"
    total = next(line for line in lines if line.split()[0] == "total")
    assert total.split()[1] == "26.0"  # (6 + 1554) s, not the lanes' steps again
