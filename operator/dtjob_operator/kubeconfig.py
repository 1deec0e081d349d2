"""Where the API server is and how to prove who we are to it (ClusterAccess): the pod's
service account in a cluster, else the kubeconfig (KUBECONFIG, a list of files, or
~/.kube/config), read the way kubectl reads it.

Why our own and not the `kubernetes` package's loader: importing any of that package
imports its whole generated client (pydantic models of every kind, about 20 MiB of heap
in a process that only ever sends JSON). What the operator needs of a kubeconfig is
small: a server, its CA, a client certificate or a bearer token, and a token that may
rotate (the projected service-account token, an exec plugin's). What it does not handle
it refuses with a message that says what to use instead (auth-provider, basic auth)."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# kubelet rotates a projected token well before it expires (80 % of its life, at least an
# hour); client-go reads the file again every minute, and so do we.
TOKEN_FILE_REREAD_SECONDS = 60.0
# An exec plugin's token is asked for again this long before the expiry it stated.
EXEC_EXPIRY_MARGIN_SECONDS = 60.0
EXEC_TIMEOUT_SECONDS = 60.0


class ConfigError(Exception):
    """No usable configuration, or one that asks for what is not supported here."""


@dataclass
class ClusterAccess:
    """One API server and our credentials for it."""

    server: str
    ca_file: str | None = None
    ca_data: str | None = None  # PEM
    insecure: bool = False
    tls_server_name: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None  # PEM
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    exec_config: dict[str, Any] | None = None
    proxy_url: str | None = None
    namespace: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _token_read_at: float = field(default=-1e9, repr=False, compare=False)
    _token_expires_at: float | None = field(default=None, repr=False, compare=False)

    def bearer(self) -> str | None:
        """The bearer token for the next request: the token file re-read once a minute, an
        exec plugin run again when its token is about to expire."""
        if self.token_file is None and self.exec_config is None:
            return self.token
        with self._lock:
            now = time.monotonic()
            if self.token_file is not None:
                if now - self._token_read_at >= TOKEN_FILE_REREAD_SECONDS or not self.token:
                    self.token = Path(self.token_file).read_text().strip()
                    self._token_read_at = now
            elif self.token is None or (
                self._token_expires_at is not None and now >= self._token_expires_at
            ):
                self.token, self._token_expires_at = run_exec_plugin(self.exec_config or {})
            return self.token

    def expire_token(self) -> None:
        """Forget a rotating token (the API server answered 401): the next call gets anew."""
        with self._lock:
            if self.token_file is not None or self.exec_config is not None:
                self.token, self._token_read_at, self._token_expires_at = None, -1e9, None

    def ssl_context(self) -> ssl.SSLContext:
        """One TLS context for every connection to the server: its CA and our client
        certificate loaded once (urllib3, given files, loads them into a context per
        connection)."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_file or self.ca_data:
            ctx.load_verify_locations(cafile=self.ca_file, cadata=self.ca_data)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        elif self.cert_data:
            _load_cert_data(ctx, self.cert_data, self.key_data)
        return ctx


def _load_cert_data(ctx: ssl.SSLContext, cert: bytes, key: bytes | None) -> None:
    """The ssl module loads a key pair from files only: a private file, gone once read."""
    with tempfile.TemporaryDirectory(prefix="dtjob-tls-") as tmp:
        path = Path(tmp) / "pair.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(cert + b"\n" + (key or b""))
        ctx.load_cert_chain(str(path))


def load() -> ClusterAccess:
    """The pod's service account when running in a cluster, else the kubeconfig."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").exists():
        return in_cluster()
    return from_kubeconfig()


def in_cluster(sa_dir: Path = SERVICE_ACCOUNT_DIR) -> ClusterAccess:
    """The API server the kubelet told the pod of, and its service account's token (read
    again as it rotates)."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    ns_file = sa_dir / "namespace"
    return ClusterAccess(
        server=f"https://{host}:{port}",
        ca_file=str(sa_dir / "ca.crt"),
        token_file=str(sa_dir / "token"),
        namespace=ns_file.read_text().strip() if ns_file.exists() else None,
    )


def kubeconfig_paths() -> list[Path]:
    """KUBECONFIG's files (a list, as kubectl reads it), else ~/.kube/config."""
    listed = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path.home() / ".kube" / "config"]


def from_kubeconfig(paths: list[Path] | None = None, context: str | None = None) -> ClusterAccess:
    """The current (or named) context of the kubeconfig files, merged as kubectl merges
    them: the first file to name a cluster, user or context, or to set current-context,
    wins; relative file paths are relative to the file that holds them."""
    files = [p for p in (paths or kubeconfig_paths()) if p.exists()]
    if not files:
        raise ConfigError(
            "no Kubernetes configuration: not running in a pod (KUBERNETES_SERVICE_HOST) "
            f"and no kubeconfig at {', '.join(map(str, paths or kubeconfig_paths()))}"
        )
    named: dict[str, dict[str, tuple[dict[str, Any], Path]]] = {
        "clusters": {}, "users": {}, "contexts": {}
    }  # fmt: skip
    current: str | None = None
    for path in files:
        doc = yaml.safe_load(path.read_text()) or {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{path}: not a kubeconfig (a YAML mapping)")
        current = current or doc.get("current-context") or None
        for section, inner in (("clusters", "cluster"), ("users", "user"),
                               ("contexts", "context")):  # fmt: skip
            for entry in doc.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") is not None:
                    named[section].setdefault(str(entry["name"]), (entry.get(inner) or {}, path))
    name = context or current
    if not name or name not in named["contexts"]:
        raise ConfigError(f"kubeconfig context {name!r} not found in {', '.join(map(str, files))}")
    ctx, _ = named["contexts"][name]
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if cluster_name not in named["clusters"]:
        raise ConfigError(f"kubeconfig context {name!r}: cluster {cluster_name!r} not found")
    cluster, cluster_file = named["clusters"][cluster_name]
    user, user_file = named["users"].get(str(user_name), ({}, cluster_file))
    if not cluster.get("server"):
        raise ConfigError(f"kubeconfig cluster {cluster_name!r} has no server")
    access = ClusterAccess(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=_path(cluster.get("certificate-authority"), cluster_file),
        ca_data=_decoded(cluster.get("certificate-authority-data"), "ascii"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy_url=cluster.get("proxy-url") or None,
        namespace=ctx.get("namespace") or None,
    )
    _set_user(access, user, user_file, str(user_name))
    return access


def _set_user(access: ClusterAccess, user: dict[str, Any], where: Path, name: str) -> None:
    if user.get("auth-provider"):
        provider = (user["auth-provider"] or {}).get("name", "?")
        raise ConfigError(
            f"kubeconfig user {name!r} uses auth-provider {provider!r}, which kubectl itself "
            "dropped in 1.26: use its exec plugin instead (gke-gcloud-auth-plugin, kubelogin)"
        )
    if user.get("username") or user.get("password"):
        raise ConfigError(
            f"kubeconfig user {name!r} uses basic auth, which Kubernetes removed in 1.19: "
            "use a client certificate or a token"
        )
    access.cert_file = _path(user.get("client-certificate"), where)
    access.key_file = _path(user.get("client-key"), where)
    access.cert_data = _decoded(user.get("client-certificate-data"))
    access.key_data = _decoded(user.get("client-key-data"))
    access.token = user.get("token") or None
    access.token_file = _path(user.get("tokenFile"), where)
    if user.get("exec"):
        access.exec_config = {**user["exec"], "_dir": str(where.parent)}


def _path(value: Any, where: Path) -> str | None:
    if not value:
        return None
    path = Path(os.path.expanduser(str(value)))
    return str(path if path.is_absolute() else where.parent / path)


def _decoded(value: Any, text: str | None = None) -> Any:
    if not value:
        return None
    raw = base64.b64decode(str(value))
    return raw.decode(text) if text else raw


def run_exec_plugin(cfg: dict[str, Any]) -> tuple[str, float | None]:
    """Run a kubeconfig exec credential plugin (client.authentication.k8s.io); its token
    and, if it said, the monotonic time to ask again."""
    command = cfg.get("command")
    if not command:
        raise ConfigError("kubeconfig exec plugin without a command")
    api_version = cfg.get("apiVersion") or "client.authentication.k8s.io/v1"
    info = {"apiVersion": api_version, "kind": "ExecCredential",
            "spec": {"interactive": False}}  # fmt: skip
    env = {**os.environ, "KUBERNETES_EXEC_INFO": json.dumps(info)}
    env.update({str(e["name"]): str(e["value"]) for e in cfg.get("env") or [] if "name" in e})
    try:
        done = subprocess.run(
            [str(command), *map(str, cfg.get("args") or [])], env=env, cwd=cfg.get("_dir"),
            capture_output=True, text=True, timeout=EXEC_TIMEOUT_SECONDS, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"kubeconfig exec plugin {command}: {exc}") from exc
    if done.returncode != 0:
        raise ConfigError(
            f"kubeconfig exec plugin {command} exited {done.returncode}: "
            f"{done.stderr.strip()[-500:]}"
        )
    try:
        status = json.loads(done.stdout).get("status") or {}
    except ValueError as exc:
        raise ConfigError(f"kubeconfig exec plugin {command}: not an ExecCredential") from exc
    if not status.get("token"):
        raise ConfigError(
            f"kubeconfig exec plugin {command} gave no token (client certificates from exec "
            "plugins are not supported by the operator: use a token)"
        )
    expires: float | None = None
    if stamp := status.get("expirationTimestamp"):
        left = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() - time.time()
        expires = time.monotonic() + max(0.0, left - EXEC_EXPIRY_MARGIN_SECONDS)
    return str(status["token"]), expires
