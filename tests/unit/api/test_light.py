"""dtjob_api is the one package every other part imports (operator, trainer, SDK, CLI): it
must stay pydantic-only, so that importing it never pulls in kopf, a Kubernetes client,
torch or the operator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

API_ROOT = Path(__file__).resolve().parents[3] / "api"

PROBE = """
import importlib, json, pkgutil, sys
import dtjob_api
for mod in pkgutil.iter_modules(dtjob_api.__path__):
    if mod.name != "crd":  # the CRD writer, run by `make crds`, also needs PyYAML
        importlib.import_module(f"dtjob_api.{mod.name}")
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""

FORBIDDEN = {
    "kopf",
    "kubernetes",
    "kubernetes_asyncio",
    "torch",
    "yaml",
    "dtjob_operator",
    "dtjob_trainer",
}


def test_importing_the_api_pulls_in_no_kubernetes_client_kopf_or_torch() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(API_ROOT)},
        timeout=120,
    )
    loaded = set(json.loads(out.stdout))
    assert "pydantic" in loaded
    assert loaded & FORBIDDEN == set()
