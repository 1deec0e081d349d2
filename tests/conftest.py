"""Shared pytest configuration for every test tree.

Each test's CPU seconds (its process and the children it waited for, setup to teardown) go
to its junit record as the property cpu_s: the lanes share 2 cores, so a test's wall time
says how long it waited as much as what it cost; hack/test_durations.py lists both.

Markers (registered in pyproject.toml, --strict-markers) follow the directory, so a test
cannot forget them: tests/integration needs the control plane, tests/e2e a real node too,
tests/gpu a CUDA device. `make test` runs `-m "not e2e and not gpu"`, `make test-gpu` the
GPU tier. A unit test module that starts processes (trainer ranks through `run_ranks` or the
launcher, or any subprocess) is marked `procs`: `make test-quick` leaves those out.
"""

from __future__ import annotations

import functools
import re
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

# A hook: `make test`'s unit lane and its helper share the test files (helpers/file_queue.py).
from helpers.file_queue import pytest_runtestloop  # noqa: F401

_BY_DIR = {
    "integration": pytest.mark.integration,
    "e2e": pytest.mark.e2e,
    "gpu": pytest.mark.gpu,
}


# What starts processes in a test module: the harnesses' launchers and subprocess itself.
_STARTS_PROCESSES = re.compile(
    r"\b(run_ranks|launch|start_launch|stop_after_checkpoint|resume_check)\(|"
    r"subprocess\.(Popen|run|check_output|check_call)\("
)


@functools.cache
def _starts_processes(path: Path) -> bool:
    return bool(_STARTS_PROCESSES.search(path.read_text(errors="replace")))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        path = Path(item.path)
        parts = path.relative_to(root).parts if path.is_relative_to(root) else ()
        if parts and parts[0] in _BY_DIR:
            item.add_marker(_BY_DIR[parts[0]])
        elif parts and parts[0] == "unit" and _starts_processes(path):
            item.add_marker(pytest.mark.procs)


_CPU_AT_SETUP = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.stash[_CPU_AT_SETUP] = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    # Before the teardown's report is made: junitxml writes the properties it carries.
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
        item.user_properties.append(("cpu_s", f"{_cpu_seconds() - item.stash[_CPU_AT_SETUP]:.2f}"))
    yield
