"""`kubectl dtj` failures that need no cluster: one line on stderr, exit code 1, never a
traceback (the process is run as users run it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parents[3]


def dtj(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(str(TOP / p) for p in ("api", "client"))
    return subprocess.run(
        [sys.executable, "-m", "dtjob_client.cli", *args],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
    )  # fmt: skip


def test_an_invalid_job_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    # No reachable cluster: the refusal must come from validation, not from the server.
    r = dtj("submit", "--name", "j", "--workers", "2", "--ps", "1",
            "--kubeconfig", str(tmp_path / "none"))  # fmt: skip
    assert r.returncode == 1
    assert r.stderr.startswith("error: invalid job: spec.roles.ps: only allowed with strategy")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_dry_run_prints_the_manifest() -> None:
    r = dtj("submit", "--name", "j", "--workers", "2", "--gpus", "1", "--dry-run", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert '"replicas": 2' in r.stdout and '"name": "j"' in r.stdout


def test_a_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    r = dtj("get", "--kubeconfig", str(tmp_path / "nope"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: no usable Kubernetes configuration"), r.stderr


def test_usage_errors_exit_1_with_a_message() -> None:
    r = dtj("wait")
    assert r.returncode == 1 and r.stderr.startswith("error: Missing argument"), r.stderr
    assert dtj("--help").returncode == 0
