"""A real Kueue for the tests: the pinned build of hack/build-binaries.sh (KUEUE_VERSION),
run on the host against the local control plane, with the CRDs of the same Go module.

How it is wired without a cluster network (docs/kueue.md, "Kueue in the tests"):
- its CRDs are applied server-side with the conversion webhook left out: every client here
  (Kueue itself, the operator, the tests) speaks v1beta2, the storage version, so the
  API server never converts;
- no webhook configurations are installed (they point at an in-cluster Service): Kueue's
  defaulting and validation of Workloads do not run, so what the operator writes must be
  complete and valid on its own, which the tests then prove;
- internal certificate management, leader election and the visibility server are off; the
  webhook server gets a self-signed pair on a free local port. With internal certificates
  off, Kueue (0.17, 0.19) reads its metrics server's pair from a fixed path whether or not
  metrics are served (cmd/kueue/main.go), and exits without it: METRICS_CERTS gets one too.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from helpers.apimetrics import free_port
from helpers.cluster import REPO
from helpers.kube import wait_for
from helpers.processes import stop_process
from helpers.prometheus import _pinned

METRICS_CERTS = Path("/etc/kueue/metrics/certs")
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"


@functools.cache
def bin_dir() -> Path:
    """The cached pinned binaries, Kueue built on first use (about 4 minutes cold)."""
    proc = subprocess.run(
        [str(REPO / "hack" / "build-binaries.sh"), "kueue", "kubectl"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, f"building kueue failed: {proc.stderr}"
    return Path(proc.stdout.strip().splitlines()[-1])


def crd_dir() -> Path:
    """The CRDs shipped in the pinned Kueue module (in Go's module cache after the build)."""
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True)
    base = Path(cache.stdout.strip()) / f"sigs.k8s.io/kueue@{_pinned('KUEUE_VERSION')}"
    path = base / "config" / "components" / "crd" / "bases"
    assert path.is_dir(), f"no Kueue CRDs at {path}: build Kueue first (bin_dir())"
    return path


def install_crds(kubeconfig: Path, workdir: Path) -> None:
    """Apply Kueue's CRDs server-side, without their conversion webhook (module docstring)."""
    docs = []
    # libyaml where PyYAML has it: 1.6 MB of CRDs took pure Python seconds to parse and dump.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    for path in sorted(crd_dir().glob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=loader):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                doc["spec"].pop("conversion", None)
                docs.append(doc)
    out = workdir / "kueue-crds.yaml"
    out.write_text(yaml.dump_all(docs, Dumper=dumper))
    kubectl = str(bin_dir() / "kubectl")
    base = [kubectl, "--kubeconfig", str(kubeconfig)]
    proc = subprocess.run(
        [*base, "apply", "--server-side", "--force-conflicts", "-f", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, f"applying Kueue's CRDs failed: {proc.stderr[-2000:]}"
    # `kubectl wait` gives up at once, instead of waiting, on a CRD the API server has not
    # written any status condition for yet ("accessor error: <nil>"): seen on a loaded
    # machine right after the apply. Asked again until the deadline.
    deadline = time.monotonic() + 90
    while True:
        proc = subprocess.run(
            [*base, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(out)],
            capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode == 0 or "accessor error" not in proc.stderr:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    assert proc.returncode == 0, f"Kueue's CRDs not established: {proc.stderr[-2000:]}"


def _self_signed(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext",
         "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
        check=True, capture_output=True,
    )  # fmt: skip


def config(
    workdir: Path,
    *,
    wait_for_pods_ready: dict[str, Any] | None = None,
    fair_sharing: dict[str, Any] | None = None,
    multikueue_kinds: list[str] | None = None,
) -> Path:
    """Kueue's Configuration for a host process: what the module docstring says.
    `multikueue_kinds` ("Kind.version.group"): a MultiKueue manager that dispatches these
    kinds through its generic adapter (docs/multikueue.md)."""
    certs = workdir / "webhook-certs"
    _self_signed(certs)
    if not (METRICS_CERTS / "tls.crt").exists():
        # Written aside and renamed into place: the integration and e2e lanes may both
        # start a Kueue, and neither may read the other's half-written pair.
        aside = METRICS_CERTS.with_name(f"certs.{os.getpid()}")
        _self_signed(aside)
        try:
            aside.rename(METRICS_CERTS)
        except OSError:  # the other lane's pair is in place
            shutil.rmtree(aside, ignore_errors=True)
    cfg: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": free_port(), "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False},
    }
    if wait_for_pods_ready is not None:
        cfg["waitForPodsReady"] = wait_for_pods_ready
    if fair_sharing is not None:  # in config v1beta2 its presence turns it on
        cfg["fairSharing"] = fair_sharing
    if multikueue_kinds:
        cfg["integrations"]["externalFrameworks"] = multikueue_kinds
        cfg["multiKueue"] = {"externalFrameworks": [{"name": k} for k in multikueue_kinds],
                             "gcInterval": "30s", "workerLostTimeout": "60s"}  # fmt: skip
    path = workdir / "kueue-config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class Kueue:
    """kueue running on the host; stop() ends it."""

    def __init__(self, kubeconfig: Path, workdir: Path, **options: Any) -> None:
        self.log = workdir / "kueue.log"
        self.kubeconfig, self.workdir, self.options = kubeconfig, workdir, options
        self._configure(options)
        self._start()

    def _configure(self, options: dict[str, Any]) -> None:
        self.cfg = config(self.workdir, **options)
        self.health = yaml.safe_load(self.cfg.read_text())["health"]["healthProbeBindAddress"]

    def reconfigure(self, **options: Any) -> None:
        """Start it again with another Configuration (config()'s options): a cluster-wide
        setting such as fair sharing, which an admin changes by restarting the manager."""
        self.stop()
        self._configure(options)
        self._start()

    def _start(self) -> None:
        with self.log.open("a") as out:
            argv = [str(bin_dir() / "kueue"), f"--config={self.cfg}"]
            self.proc = subprocess.Popen(
                [*argv, f"--kubeconfig={self.kubeconfig}"],
                stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
            )  # fmt: skip
        wait_for(lambda: self._healthy(self.health), 90, what=f"Kueue healthy (log {self.log})")

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop it, stay down `down_seconds`, start it again with the same configuration
        (a Kueue upgrade or a rescheduled manager pod, as a cluster sees it)."""
        self.stop()
        time.sleep(down_seconds)
        self._start()

    def _healthy(self, address: str) -> bool:
        if self.proc.poll() is not None:
            tail = self.log.read_text()[-3000:]
            raise RuntimeError(f"kueue exited with {self.proc.returncode}: {tail}")
        try:
            with urllib.request.urlopen(f"http://{address}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        stop_process(self.proc)
