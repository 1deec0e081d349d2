"""The images start their processes from bytecode: every module the trainer, the operator
and the custom example import has a valid .pyc in the image, checked in a pod on the real
node with the image the node pulled. Without one, each container start compiles torch
from source (about 5 s of CPU per process, 20 s at the examples' 250m), again at every
gang restart; that is what the images shipped with before."""

from __future__ import annotations

import json
import time

import pytest

from helpers.realnode import E2E, pushed

LABEL = "dtjob.io/node"  # the real node's label and taint (hack/realnode_overlay.py)

# Imports what the process imports at start, then lists each imported source file whose
# .pyc is missing or stale: a timestamp .pyc is valid when it records the source's mtime and
# size, which is what Python checks before it compiles instead. (Hash-based ones are
# checked by hash or not at all: accepted as they are.)
CHECK = r"""
import importlib, json, os, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
missing = []
for name, module in list(sys.modules.items()):
    # Modules loaded from a source file (not __main__, not torch's module-like namespaces).
    spec = getattr(module, "__spec__", None)
    src = spec.origin if spec is not None and spec.has_location else None
    if not src or not src.endswith(".py") or not spec.cached:
        continue
    try:
        with open(spec.cached, "rb") as f:
            head = f.read(16)
    except OSError:
        missing.append(name)
        continue
    st = os.stat(src)
    stamp = (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
    if head[4:8] == bytes(4) and (
        int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little")
    ) != stamp:
        missing.append(name)
print(json.dumps({"modules": len(sys.modules), "no_bytecode": sorted(missing)}))
"""

IMAGES = {
    # image in the registry, tag key in pushed.env, what its process imports at start
    "trainer": ("dtjob-trainer", "TAG", ["torch", "dtjob_trainer.runner", "dtjob_trainer.loop",
                                         "dtjob_trainer.strategies.data_parallel"]),
    "operator": ("dtjob-operator", "TAG", ["dtjob_operator.__main__"]),
    "custom-example": ("dtjob-custom-example", "CUSTOM_TAG", ["torch", "torch.distributed.run"]),
}  # fmt: skip


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_image_processes_start_from_bytecode(e2e: E2E, e2e_namespace: str, image: str) -> None:
    repo, tag_key, modules = IMAGES[image]
    where = pushed()
    ref = f"{where['REGISTRY']}/{repo}:{where[tag_key]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bytecode", "namespace": e2e_namespace},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {LABEL: "real"},
            "tolerations": [{"key": LABEL, "operator": "Equal", "value": "real",
                             "effect": "NoSchedule"}],
            "containers": [{
                "name": "check", "image": ref, "command": ["python3", "-c", CHECK, *modules],
                "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}},
            }],
        },
    }  # fmt: skip
    e2e.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    deadline, phase = time.monotonic() + 300, None
    while phase not in ("Succeeded", "Failed") and time.monotonic() < deadline:
        time.sleep(1)
        phase = e2e.get("pod", "-n", e2e_namespace, "bytecode").get("status", {}).get("phase")
    log = e2e.kubectl("logs", "-n", e2e_namespace, "bytecode", check=False)
    assert phase == "Succeeded", f"{ref}: the check pod is {phase}: {log[-2000:]}"
    result = json.loads(log.splitlines()[-1])
    assert result["modules"] > len(modules), result
    assert result["no_bytecode"] == [], f"{ref}: imported without valid bytecode: {result}"
