"""Kubeflow's training-operator (v1) as a host process on the local cluster, for the
Kubeflow column of bench/operator_scale.py: the pinned build of hack/build-binaries.sh
(KUBEFLOW_TRAINING_OPERATOR_VERSION), its PyTorchJob CRD from the same Go module, and the
start-up it needs without a cluster network.

v1.8.1 has no flag that turns its webhook server or its certificate rotation off
(cmd/training-operator.v1/main.go), and it registers its controllers only once the
rotator (open-policy-agent cert-controller, pkg/cert) says the certificates are ready. The
rotator reads, never creates, the Secret kubeflow/training-operator-webhook-cert; writes a
CA and a serving pair into it; then waits (backing off, about 17 minutes in all) for the
pair to appear in /tmp/k8s-webhook-server/serving-certs, which in a cluster is that
Secret's volume mount, and for its ValidatingWebhookConfiguration to take the CA, a
missing configuration being logged and skipped. So here the namespace and an empty Secret
are created, the pair is copied out of the Secret into that directory as a kubelet would
mount it, and no webhook configuration is installed: the API server never calls the
validating webhook, which has no route to it anyway (docs: "Not measured").
"""

from __future__ import annotations

import base64
import functools
import os
import re
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from helpers.apimetrics import LABEL, free_port
from helpers.kube import wait_for
from helpers.processes import stop_process
from helpers.prometheus import _pinned

TOP = Path(__file__).resolve().parents[1]
NAME = "kubeflow-training-operator"  # the component of hack/build-binaries.sh
NAMESPACE = "kubeflow"  # its default without MY_POD_NAMESPACE (pkg/cert)
CERT_SECRET = "training-operator-webhook-cert"  # --webhook-secret-name's default
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # fixed in pkg/cert
# What it runs with when started as its manifests start it (no flags): controller-runtime
# v0.17's client defaults, a bucket each for the manager's client (job status), the
# clientset that creates pods and services, and the event recorder; one reconcile at a time.
CLIENT_SETTINGS = {
    "qps": 20,
    "burst": 30,
    "controller_threads": 1,
    "source": "defaults: controller-runtime v0.17.2 GetConfigOrDie (20 QPS, burst 30, per "
    "client: the manager's client, the clientset that creates pods and services, and the "
    "event recorder each have one); --controller-threads 1",
}
# Beside a free local port each for metrics, health probes and the webhook server.
FLAGS = [
    "--enable-scheme=pytorchjob",
    "--leader-elect=false",
    # Errors only, as the dtjob operator logs warnings only in the benchmark: its default
    # (zap development mode) logs every reconcile at debug level. Its job controller logs
    # through logrus too, two lines per pod at info level, which no flag turns down.
    "--zap-log-level=error",
]
REQUESTS = re.compile(r"^rest_client_requests_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def version() -> str:
    return str(_pinned("KUBEFLOW_TRAINING_OPERATOR_VERSION"))


@functools.cache
def bin_dir() -> Path:
    """The cached pinned binaries, the training-operator built on first use (minutes)."""
    proc = subprocess.run(
        [str(TOP / "hack" / "build-binaries.sh"), NAME],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"building {NAME} failed: {proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def crd_file() -> Path:
    """The PyTorchJob CRD shipped in the pinned module (in Go's module cache after the
    build): manifests/base/crds, what the project's kustomization installs; it goes on
    the cluster with helpers.crd.install_crd like dtjob's own."""
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                           check=True)  # fmt: skip
    module = Path(cache.stdout.strip()) / f"github.com/kubeflow/training-operator@{version()}"
    path = module / "manifests" / "base" / "crds" / "kubeflow.org_pytorchjobs.yaml"
    if not path.is_file():
        raise RuntimeError(f"no PyTorchJob CRD at {path}: build {NAME} first (bin_dir())")
    return path


def _ensure_cert_secret(core: client.CoreV1Api) -> None:
    creates: list[Callable[[], object]] = [
        lambda: core.create_namespace({"metadata": {"name": NAMESPACE}}),
        lambda: core.create_namespaced_secret(
            NAMESPACE, {"metadata": {"name": CERT_SECRET}, "type": "Opaque"}
        ),
    ]
    for create in creates:
        try:
            create()
        except client.ApiException as exc:
            if exc.status != 409:  # kept from an earlier run: the rotator reuses its pair
                raise


def _mount_certs(core: client.CoreV1Api) -> bool:
    """Copy the rotator's serving pair out of its Secret into CERT_DIR, as the Secret's
    volume mount would; False while the rotator has not written it."""
    data = core.read_namespaced_secret(CERT_SECRET, NAMESPACE).data or {}
    if "tls.crt" not in data or "tls.key" not in data:
        return False
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    for key in ("tls.key", "tls.crt"):  # the key first: the rotator waits on the cert
        aside = CERT_DIR / f".{key}.{os.getpid()}"
        aside.write_bytes(base64.b64decode(data[key]))
        aside.replace(CERT_DIR / key)
    return True


class KubeflowOperator:
    """training-operator on the host, PyTorchJobs only; start() returns once it answers
    ready, stop() ends it."""

    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.kubeconfig, self.log = kubeconfig, log
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return [
            str(bin_dir() / NAME),
            *FLAGS,
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            f"--webhook-server-port={free_port()}",
        ]

    def start(self, core: client.CoreV1Api) -> None:
        _ensure_cert_secret(core)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv(),
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_for(lambda: self._running() and _mount_certs(core), 60,
                 what=f"{NAME}'s serving certificate in its Secret (log {self.log})")  # fmt: skip
        wait_for(lambda: self._running() and self._ready(), 120,
                 what=f"{NAME} ready (log {self.log})")  # fmt: skip

    def _running(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{NAME} exited with {self.proc.returncode}: {tail}")
        return True

    def _ready(self) -> bool:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def requests_sent(self) -> Counter[str]:
        """What its clients have sent so far by HTTP method (client-go's
        rest_client_requests_total; it has no resource label). A watch counts as one GET
        when it opens."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        counts: Counter[str] = Counter()
        for line in text.splitlines():
            if m := REQUESTS.match(line):
                counts[dict(LABEL.findall(m["labels"]))["method"]] += int(float(m["value"]))
        return counts

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


def describe() -> dict[str, Any]:
    """What the result records about this operator."""
    return {"version": version(), "client": CLIENT_SETTINGS, "flags": FLAGS}
