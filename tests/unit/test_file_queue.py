"""Two pytest processes sharing the test files as a queue (tests/helpers/file_queue.py) run
every test once between them, with each file's module fixture set up and torn down once, in
the one process that claimed the file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MODULE = """
import os, time, pytest

@pytest.fixture(scope="module")
def mod():
    with open(os.environ["LOG"], "a") as f:
        f.write(f"setup {os.path.basename(__file__)[:-3]} {os.getpid()}\\n")
    yield
    with open(os.environ["LOG"], "a") as f:
        f.write(f"teardown {os.path.basename(__file__)[:-3]} {os.getpid()}\\n")

@pytest.mark.parametrize("i", range(3))
def test_it(mod, i):
    time.sleep(0.05)
    with open(os.environ["LOG"], "a") as f:
        f.write(f"ran {os.path.basename(__file__)[:-3]} {i} {os.getpid()}\\n")
"""


def test_two_processes_run_every_file_once_and_whole(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for package in ("a", "b"):  # two packages: fixtures of one are torn down before the other
        (tree / package).mkdir(parents=True)
        for i in range(4):
            (tree / package / f"test_{package}{i}.py").write_text(MODULE)
    log, claims = tmp_path / "log", tmp_path / "claims"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "helpers.file_queue",
                "--import-mode=importlib",
                "--rootdir",
                str(tree),
                str(tree),
            ],
            env={
                **os.environ,
                "PYTHONPATH": str(TESTS),
                "LOG": str(log),
                "DTJOB_TEST_CLAIMS": str(claims),
                "DTJOB_TEST_CLAIMS_FROM_END": from_end,
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
        for from_end in ("0", "1")
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    lines = [line.split() for line in log.read_text().splitlines()]
    ran = sorted((m, i) for kind, m, *rest in lines if kind == "ran" for i in rest[:1])
    assert ran == sorted((f"test_{p}{n}", str(i)) for p in "ab" for n in range(4) for i in range(3))
    for kind in ("setup", "teardown"):
        mods = [(m, pid) for k, m, pid in (line for line in lines if line[0] != "ran") if k == kind]
        assert sorted(m for m, _ in mods) == sorted(f"test_{p}{n}" for p in "ab" for n in range(4))
    # each file's tests ran in the process that set its fixture up
    owner = {m: pid for k, m, pid in (line for line in lines if line[0] == "setup")}
    assert all(owner[m] == rest[1] for kind, m, *rest in lines if kind == "ran")
    assert len(set(owner.values())) == 2, outputs  # both processes took files
    assert len(list(claims.iterdir())) == 8
