"""hack/failed_tests.py: which failed tests of `make test` run again alone. Only lanes that
failed by their tests alone, and few of them: anything else fails the run as it stands."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HACK = Path(__file__).resolve().parents[2] / "hack" / "failed_tests.py"


def load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("failed_tests_script", HACK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _xml(path: Path, *cases: tuple[str, str, bool]) -> None:
    body = "".join(
        f'<testcase classname="{cls}" file="{cls.split(".T")[0].replace(".", "/")}.py" '
        f'name="{name}" time="1">{"<failure/>" if failed else ""}</testcase>'
        for cls, name, failed in cases
    )
    path.write_text(f"<testsuites><testsuite>{body}</testsuite></testsuites>")


def _phases(path: Path, **rcs: int) -> None:
    path.write_text("".join(f"lane:{k.replace('_', '-')}\t10\t{v}\t-\n" for k, v in rcs.items()))


def test_failed_tests_of_failed_lanes_get_their_node_ids(tmp_path: Path) -> None:
    _phases(tmp_path / "phases.tsv", gpu_rehearsal=0, unit=2, unit_helper=2, integration=2,
            integration_2=2)  # fmt: skip
    _xml(
        tmp_path / "unit.xml", ("tests.unit.a", "test_x[FSDP]", True), ("tests.unit.a", "ok", False)
    )
    _xml(tmp_path / "unit-helper.xml", ("tests.unit.b.TestC", "test_y", True))
    _xml(tmp_path / "integration.xml", ("tests.integration.c", "test_z", True))
    _xml(tmp_path / "integration-2.xml", ("tests.integration.d", "test_w", True))
    todo, why = load().plan(tmp_path, most=4)
    assert why == ""
    assert todo == {
        "unit": ["tests/unit/a.py::test_x[FSDP]", "tests/unit/b.py::TestC::test_y"],
        "integration": ["tests/integration/c.py::test_z", "tests/integration/d.py::test_w"],
    }


def test_a_lane_failed_otherwise_or_many_failures_run_nothing_again(tmp_path: Path) -> None:
    script = load()
    _phases(tmp_path / "phases.tsv", gpu_rehearsal=1)
    assert script.plan(tmp_path, most=4) == (
        {},
        "the gpu-rehearsal step failed, and it is not a pytest tier",
    )
    # A collection error or a crash: the lane failed with no failed test in its report.
    _phases(tmp_path / "phases.tsv", e2e=2)
    _xml(tmp_path / "e2e.xml", ("tests.e2e.a", "test_ok", False))
    assert "without a failed test" in script.plan(tmp_path, most=4)[1]
    _phases(tmp_path / "phases.tsv", unit=1)
    _xml(tmp_path / "unit.xml", *[("tests.unit.a", f"t{i}", True) for i in range(5)])
    assert script.plan(tmp_path, most=4) == (
        {},
        "5 tests failed: more than 4, not a loaded machine's doing",
    )
