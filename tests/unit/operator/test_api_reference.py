"""docs/api-reference.md is generated from the CRD (hack/api_reference.py, run by
`make crds`): current, and complete down to the fields Kubernetes itself types."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from types import ModuleType

from unit.operator.test_chart import REPO

SCRIPT = REPO / "hack" / "api_reference.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_current() -> None:
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_every_field_of_ours_is_listed_with_type_default_and_description() -> None:
    gen = generator()
    (crd,) = gen.load_crds()
    page = gen.render([crd])
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    paths = [path for path, _, _ in gen.fields(root)]
    assert len(paths) > 150
    for path in paths:
        assert f"| `{path}` |" in page, path
    assert '| `spec.strategy.backend` | string (one of `auto`, `nccl`, `gloo`) | `"auto"` |' in page
    assert "| `spec.roles.worker.template.spec` | object, *core/v1* |" in page
    # Kubernetes' own types are named, not expanded field by field.
    assert "spec.roles.worker.template.spec.containers" not in page
    # The CEL rules with the message the API server gives.
    assert (
        "| `spec.runPolicy.maxBackoffSeconds` | must be at least runPolicy.backoffSeconds |" in page
    )


def test_a_field_added_to_the_crd_appears_in_the_reference() -> None:
    gen = generator()
    (crd,) = gen.load_crds()
    changed = copy.deepcopy(crd)
    spec = changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["newField"] = {"type": "integer", "default": 7, "description": "New."}
    page = gen.render([changed])
    assert "| `spec.newField` | integer | `7` | New. |" in page
    assert page != gen.render([crd])
