"""kubectl-level helpers for the end-to-end tier (tests/e2e): the way a user drives the
cluster, with the real node's overlay from hack/realnode_overlay.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from helpers.cluster import REPO
from helpers.examples import manifest_docs

sys_path = str(REPO / "hack")
if sys_path not in __import__("sys").path:
    __import__("sys").path.insert(0, sys_path)
from realnode_overlay import place_on_real_node  # noqa: E402

RELEASE, RELEASE_NS = "dtjob", "dtjob-system"
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class E2E:
    kubeconfig: Path
    state: Path
    env: dict[str, str]

    def dtj(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """`kubectl dtj` (kubectl finds `kubectl-dtj` on PATH; here its module entry point,
        the same code)."""
        path = os.pathsep.join(str(REPO / p) for p in ("api", "client"))
        return subprocess.run(
            [sys.executable, "-m", "dtjob_client.cli", *args],
            capture_output=True, text=True, timeout=timeout, env={**self.env, "PYTHONPATH": path},
        )  # fmt: skip

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            ["kubectl", *args], input=stdin, env=self.env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def new_namespace(self) -> str:
        name = f"e2e-{uuid.uuid4().hex[:6]}"
        self.kubectl("create", "namespace", name)
        return name

    def apply_example(
        self,
        example: str,
        ns: str,
        *,
        labels: dict[str, str] | None = None,
        name: str | None = None,
        **changes: Any,
    ) -> dict[str, Any]:
        """`kubectl apply` of examples/cpu/<example>.yaml, placed on the real node, with
        these extra labels (and another name); the manifest's other objects (custom-model's
        ConfigMap of code) go first."""
        docs = manifest_docs(REPO / "examples" / "cpu" / f"{example}.yaml")
        job = next(d for d in docs if d["kind"] == "DistributedTrainingJob")
        job["metadata"].setdefault("labels", {}).update(labels or {})
        if name:
            job["metadata"]["name"] = name
        for other in (d for d in docs if d is not job):
            self.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(other))
        place_on_real_node(job, cpu="250m")
        for path, value in changes.items():  # e.g. trainer__steps=600
            *parents, leaf = path.split("__")
            node = job["spec"]
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        self.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(job))
        return job

    def job(self, ns: str, name: str) -> dict[str, Any]:
        return self.get("dtj", "-n", ns, name)

    def hostpath_claim(self, ns: str, path: Path, name: str = "ckpt") -> str:
        """A PVC `name` bound to a hostPath PV at `path` on the real node (one node: the
        ReadWriteOnce claim is shared by every pod of the gang); returns the claim name."""
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 1000, 1000)  # the images' trainer user
        self.kubectl(
            "apply",
            "-f",
            "-",
            stdin=f"""
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {ns}-{name}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: e2e-hostpath
  claimRef: {{namespace: {ns}, name: {name}}}
  hostPath: {{path: {path}, type: Directory}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: e2e-hostpath
  resources: {{requests: {{storage: 1Gi}}}}
""",
        )
        return name


def pushed() -> dict[str, str]:
    """What hack/images.sh pushed last: REGISTRY (host:port), TAG, CUSTOM_TAG."""
    cache = Path(os.environ.get("DTJOB_CACHE") or Path.home() / ".cache" / "dtjob")
    lines = (cache / "images" / "pushed.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def registry_digest(registry: str, name: str, tag: str) -> str:
    """The manifest digest the registry serves for name:tag (what a node that pulled it
    reports as the image's repo digest)."""
    accept = ", ".join(f"application/vnd.{t}" for t in (
        "docker.distribution.manifest.v2+json", "docker.distribution.manifest.list.v2+json",
        "oci.image.manifest.v1+json", "oci.image.index.v1+json"))  # fmt: skip
    req = urllib.request.Request(f"http://{registry}/v2/{name}/manifests/{tag}", method="HEAD",
                                 headers={"Accept": accept})  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # local, no proxy
    with opener.open(req, timeout=10) as resp:
        return str(resp.headers["Docker-Content-Digest"])


def watch_job(e2e: E2E, ns: str, name: str, timeout: float, on_poll: Any = None) -> dict[str, Any]:
    """Poll until the job is terminal; on_poll(job, printed_row) sees every observation."""
    deadline = time.monotonic() + timeout
    while True:
        job = e2e.job(ns, name)
        row = e2e.kubectl("get", "dtj", "-n", ns, name, "--no-headers", check=False)
        if on_poll:
            on_poll(job, row)
        phase = job.get("status", {}).get("phase")
        if phase in TERMINAL:
            return job
        if time.monotonic() > deadline:
            pods = e2e.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False)
            raise AssertionError(f"{name} still {phase} after {timeout:.0f} s: "
                                 f"{json.dumps(job.get('status'))[:1500]}\n{pods}")  # fmt: skip
        time.sleep(2)
