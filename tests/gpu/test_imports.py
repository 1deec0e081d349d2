"""Every module the GPU machine runs imports there (not skipped without CUDA).

The GPU machine's image has its own torch (2.11 where ours is 2.13) and, besides it, only
what the GPU kit carries (docs/gpu.md). An ImportError or a missing torch API at import
time would cost a GPU window; `make gpu-rehearsal` runs this in that image's Python and
torch on CPU, so it is found here instead.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {"dtjob_api": REPO / "api", "dtjob_trainer": REPO / "trainer_image"}
# bench/gpu.py's measurements, and bench/gpu_claims.py's sections and what they share, are
# modules of their own beside them.
SCRIPTS = [
    REPO / "bench" / name
    for name in (
        "gpu.py",
        "gpu_mfu.py",
        "gpu_memory.py",
        "gpu_claims.py",
        "claims_common.py",
        "claims_launch.py",
        "claims_hetero.py",
        "claims_ps.py",
        "claims_async.py",
    )
]


def modules() -> list[str]:
    found = []
    for package, root in PACKAGES.items():
        found.append(package)
        for info in pkgutil.walk_packages([str(root / package)], prefix=f"{package}."):
            found.append(info.name)
    return sorted(found)


@pytest.mark.parametrize("name", modules())
def test_module_imports(name: str) -> None:
    importlib.import_module(name)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_imports(script: Path) -> None:
    # Imported in a process of its own, as __main__ is not: its top level only. Its
    # directory first on sys.path, as `python bench/<script>` puts it: gpu_claims.py and
    # the claims_*.py modules import each other as siblings.
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(script.parent)!r}); "
        f"runpy.run_path({str(script)!r}, run_name='imported')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_walk_finds_the_strategies() -> None:
    # A walk that found nothing would pass vacuously.
    assert "dtjob_trainer.strategies.fsdp" in modules()
    assert "dtjob_api.spec" in modules()
