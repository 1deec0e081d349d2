"""What the local cluster is: its settings (from the environment) and the command line of
each component. Every listener is on 127.0.0.1. hack/cluster.py runs them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import cluster_api

HACK = Path(__file__).resolve().parent


class ClusterError(RuntimeError):
    """A failure the user can act on; printed as one line."""


def cache_dir() -> Path:
    """$DTJOB_CACHE, where every build, image and cluster state is kept."""
    return Path(os.environ.get("DTJOB_CACHE") or Path.home() / ".cache" / "dtjob")


@dataclass(frozen=True)
class Config:
    state: Path
    port_base: int
    nodes: int
    gpus: int
    labels: dict[str, str]
    cpu: str
    memory: str
    timeout: float

    @classmethod
    def from_env(cls) -> Config:
        env = os.environ
        cache = cache_dir()
        try:
            return cls(
                state=Path(env.get("DTJOB_CLUSTER_STATE") or cache / "cluster").resolve(),
                port_base=int(env.get("DTJOB_CLUSTER_PORT_BASE") or 16440),
                nodes=int(env.get("DTJOB_NODES") or 4),
                gpus=int(env.get("DTJOB_GPUS_PER_NODE") or 8),
                labels=cluster_api.parse_labels(env.get("DTJOB_NODE_LABELS", "")),
                cpu=env.get("DTJOB_NODE_CPU") or "64",
                memory=env.get("DTJOB_NODE_MEMORY") or "512Gi",
                timeout=float(env.get("DTJOB_CLUSTER_TIMEOUT") or 60),
            )
        except ValueError as e:
            raise ClusterError(f"bad cluster setting: {e}") from e

    @property
    def ports(self) -> dict[str, int]:
        b = self.port_base
        return {
            "etcd": b, "etcd-peer": b + 1, "kube-apiserver": b + 3,
            "kube-controller-manager": b + 4, "kube-scheduler": b + 5,
        }  # fmt: skip

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    pki = property(lambda self: self.state / "pki")
    kubeconfig = property(lambda self: self.state / "kubeconfig")

    def log(self, name: str) -> Path:
        return self.state / "logs" / f"{name}.log"

    def pidfile(self, name: str) -> Path:
        return self.state / "pids" / f"{name}.pid"


def command(cfg: Config, name: str, bins: Path) -> list[str]:
    """The command line of one component. Every listener is on 127.0.0.1."""
    p, pki, st = cfg.ports, cfg.pki, cfg.state
    loop = "http://127.0.0.1"
    if name == "etcd":
        return [
            str(bins / "etcd"), "--name=dtjob", f"--data-dir={st / 'etcd'}",
            f"--listen-client-urls={loop}:{p['etcd']}",
            f"--advertise-client-urls={loop}:{p['etcd']}",
            f"--listen-peer-urls={loop}:{p['etcd-peer']}",
            f"--initial-advertise-peer-urls={loop}:{p['etcd-peer']}",
            f"--initial-cluster=dtjob={loop}:{p['etcd-peer']}",
            # A throwaway test store: durability buys nothing and fsync costs seconds.
            "--unsafe-no-fsync", "--log-level=warn",
        ]  # fmt: skip
    if name == "kube-apiserver":
        return [
            str(bins / "kube-apiserver"), f"--etcd-servers={loop}:{p['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={p['kube-apiserver']}", f"--cert-dir={st / 'apiserver'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=Node,RBAC",
            # Added to the default plugins (which include ResourceQuota).
            "--enable-admission-plugins=NodeRestriction",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true",
            # Front proxy: lets components verify delegated authentication (and aggregated
            # APIs work); the shared CA is fine for a loopback-only cluster.
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            # The real node's kubelet (hack/realnode.py) is reached by address: its name
            # resolves nowhere.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            # Endpoints may not hold a loopback address; the reconciler would only log errors.
            "--endpoint-reconciler-type=none", "--profiling=false",
            # Who deleted which pod (hack/audit-policy.yaml): a lost gang member's culprit.
            f"--audit-policy-file={HACK / 'audit-policy.yaml'}",
            f"--audit-log-path={cfg.log('audit')}", "--audit-log-maxsize=50",
            "--audit-log-maxbackup=1",
        ]  # fmt: skip
    own_kc = str(st / f"{name}.kubeconfig")
    common = [
        f"--kubeconfig={own_kc}", f"--authentication-kubeconfig={own_kc}",
        f"--authorization-kubeconfig={own_kc}", "--bind-address=127.0.0.1",
        f"--secure-port={p.get(name)}", "--leader-elect=false",  # one instance: no election wait
    ]  # fmt: skip
    if name == "kube-controller-manager":
        return [
            str(bins / name), *common, "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
        ]  # fmt: skip
    if name == "kube-scheduler":
        return [str(bins / name), *common]
    if name == "kwok":
        configs = sorted((HACK / "kwok").glob("*.yaml"))
        return [
            str(bins / "kwok"), f"--kubeconfig={cfg.kubeconfig}",
            # Explicit configs: KWOK would otherwise read ~/.kwok/kwok.yaml.
            *(f"--config={c}" for c in configs),
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={cluster_api.KWOK_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40", "--cidr=10.0.0.1/16",
        ]  # fmt: skip
    raise ValueError(name)
