"""The local launcher's children import the trainer and the API package from where the
launcher does (a checkout or site-packages), whatever their directory, and never inherit the
launching shell's contract variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dtjob_api
import dtjob_trainer
from dtjob_trainer.launch import child_base_env

PROBE = "import dtjob_api, dtjob_trainer.config; print(dtjob_api.__file__, dtjob_trainer.__file__)"


def test_children_import_the_trainer_and_the_api_package_from_where_the_launcher_does(
    tmp_path: Path,
) -> None:
    shell = {"PYTHONPATH": "/elsewhere", "RANK": "3", "DTJ_ROLE": "ps", "HOME": "/home/u"}
    env = child_base_env(shell)
    assert ("RANK" in env, "DTJ_ROLE" in env, env["HOME"]) == (False, False, "/home/u")
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == "/elsewhere"  # kept, after ours
    # Started in an empty directory with nothing but that path, a child finds both packages
    # (the trainer's config imports dtjob_api) exactly where this process found them.
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={"PYTHONPATH": env["PYTHONPATH"]},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    found = [str(Path(p).resolve()) for p in out.stdout.split()]
    assert found == [str(Path(m.__file__).resolve()) for m in (dtjob_api, dtjob_trainer)]
