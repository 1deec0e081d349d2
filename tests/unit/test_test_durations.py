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


def test_every_failed_test_is_named_with_its_message(tmp_path: Path) -> None:
    # CI shows only the log's tail, which the summary ends: a failure must be named there.
    (tmp_path / "integration.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.integration.t" name="test_a" '
        'time="175.4"><failure message="AssertionError: gave up after 120 s\nwaiting">tb'
        '</failure></testcase><testcase classname="tests.integration.t" name="test_b" '
        'time="1"/></testsuite></testsuites>'
    )
    script = load()
    lines = script.summary(script.report(tmp_path, top=5)).splitlines()
    at = lines.index("  FAILED (integration, 175 s) tests.integration.t::test_a")
    assert lines[at + 1].strip() == "AssertionError: gave up after 120 s waiting"
    assert not any("test_b" in line and "FAILED" in line for line in lines)


def test_cpu_seconds_the_gauge_and_the_containers_are_summed_up(tmp_path: Path) -> None:
    # hack/timed.sh's fourth column where it could count ("-" where it could not), and the
    # lines hack/test-lanes.sh adds to load.txt.
    (tmp_path / "phases.tsv").write_text(
        "lint\t6.0\t0\t-\nlane:unit\t600.0\t0\t540.0\nlanes\t610\t0\n"
    )
    (tmp_path / "load.txt").write_text("gauge_seconds 0.9\ncontainers_cpu_seconds 1200.0\n")
    script = load()
    rec = script.report(tmp_path, top=5)
    assert [p.get("cpu_seconds") for p in rec["phases"]] == [None, 540.0, None]
    assert rec["load"] == {"gauge_seconds": 0.9, "containers_cpu_seconds": 1200.0}
    text = script.summary(rec)
    assert "    unit                  10.0 min  CPU   9.0 min" in text
    assert "real node's containers (not in the lanes' figures):  20.0 min" in text
    assert "machine speed gauge: 0.90 s" in text


def _case(name: str, failed: bool) -> str:
    body = '<failure message="gave up">tb</failure>' if failed else ""
    return (
        f'<testcase classname="tests.unit.t" file="tests/unit/t.py" name="{name}" time="3">'
        f"{body}</testcase>"
    )


def test_a_failure_that_passed_alone_is_flaky_and_all_failures_end_the_summary(
    tmp_path: Path,
) -> None:
    suite = "<testsuites><testsuite>{}</testsuite></testsuites>"
    (tmp_path / "unit.xml").write_text(suite.format(_case("test_a", True) + _case("test_b", True)))
    (tmp_path / "rerun-unit.xml").write_text(
        suite.format(_case("test_a", False) + _case("test_b", True))
    )
    script = load()
    rec = script.report(tmp_path, top=5)
    assert [(c["test"], c["flaky"]) for c in rec["failed"]] == [
        ("tests.unit.t::test_a", True),
        ("tests.unit.t::test_b", False),
    ]
    assert [f["file"] for f in rec["files"]] == ["tests/unit/t.py"]
    assert rec["files"][0]["seconds"] == 6.0  # the second runs are not counted in
    lines = script.summary(rec).splitlines()
    assert lines[-3:] == [
        "  2 failed in the lanes:",
        "    FLAKY (passed alone) (unit) tests.unit.t::test_a",
        "    FAILED (unit) tests.unit.t::test_b",
    ]


def test_the_tests_and_files_that_cost_the_most_cpu_are_listed(tmp_path: Path) -> None:
    # Wall time on shared cores says how long a test waited; cpu_s (tests/conftest.py) what
    # it took from the other lanes. A test that only waits is slow but cheap.
    def case(name: str, seconds: float, cpu: float) -> str:
        return (
            f'<testcase classname="tests.unit.t" file="tests/unit/t.py" name="{name}" '
            f'time="{seconds}"><properties><property name="cpu_s" value="{cpu}"/></properties>'
            "</testcase>"
        )

    (tmp_path / "unit.xml").write_text(
        f"<testsuites><testsuite>{case('waits', 90, 0.4)}{case('computes', 30, 55.5)}"
        '<testcase classname="tests.unit.t" name="older_record" time="1"/>'
        "</testsuite></testsuites>"
    )
    script = load()
    rec = script.report(tmp_path, top=5)
    assert [c["test"] for c in rec["top_cpu_tests"]] == [
        "tests.unit.t::computes",
        "tests.unit.t::waits",
    ]
    assert rec["files"] == [{"file": "tests/unit/t.py", "seconds": 121.0, "cpu_s": 55.9}]
    text = script.summary(rec)
    assert "       55.5 CPU-s  tests.unit.t::computes" in text
    assert "       55.9 CPU-s  tests/unit/t.py" in text
