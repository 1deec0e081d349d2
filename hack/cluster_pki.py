"""Certificates and kubeconfigs for the local control plane (stdlib + the openssl CLI).

Everything is generated once per state directory and kept across cluster-down/up, so a
warm start spends no time on key generation (what is missing is made on the next start).
EC P-256 keys: they generate in milliseconds and every component (and Python's ssl)
accepts them.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

# Identities the RBAC bootstrap policy already knows: system:masters is cluster-admin,
# the two system:kube-* users have their own bootstrap ClusterRoles.
CLIENTS = {
    "admin": "/O=system:masters/CN=dtjob-admin",
    "kube-controller-manager": "/CN=system:kube-controller-manager",
    "kube-scheduler": "/CN=system:kube-scheduler",
    # The apiserver's identity towards aggregated API servers (front proxy).
    "front-proxy-client": "/CN=front-proxy-client",
}
# The apiserver's serving names: loopback for us, the in-cluster names and the first service
# IP for pods on a real node later (10.96.0.1 is a config value here, never dialled).
SERVING_SANS = (
    "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
    "DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
)
DAYS = "3650"


class PkiError(RuntimeError):
    pass


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise PkiError(f"openssl {args[0]} failed: {last}")


def _ec_key(path: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(path))
    path.chmod(0o600)


def _signed_cert(pki: Path, name: str, subject: str, ext: str) -> None:
    key, csr, crt, extfile = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    _ec_key(key)
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    extfile.write_text(ext)
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
        "-CAcreateserial", "-days", DAYS, "-extfile", str(extfile), "-out", str(crt),
    )  # fmt: skip
    csr.unlink()
    extfile.unlink()


def ensure_pki(pki: Path) -> None:
    """Create whatever of the CA, serving, client and service-account keys is missing."""
    pki.mkdir(parents=True, exist_ok=True)
    if not (pki / "ca.crt").exists():
        for old in pki.iterdir():  # leaves signed by a lost CA are useless
            old.unlink()
        _ec_key(pki / "ca.key")
        _openssl(
            "req", "-x509", "-new", "-key", str(pki / "ca.key"), "-subj", "/CN=dtjob-local-ca",
            "-days", DAYS, "-out", str(pki / "ca.crt"),
        )  # fmt: skip
    if not (pki / "apiserver.crt").exists():
        _signed_cert(
            pki, "apiserver", "/CN=kube-apiserver",
            f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName={SERVING_SANS}\n",
        )  # fmt: skip
    for name, subject in CLIENTS.items():
        if not (pki / f"{name}.crt").exists():
            _signed_cert(
                pki, name, subject,
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                "extendedKeyUsage=clientAuth\n",
            )  # fmt: skip
    # Service-account token signing key (apiserver signs, controller-manager signs for
    # its controllers, both verify with the same key).
    if not (pki / "sa.pub").exists():
        _ec_key(pki / "sa.key")
        _openssl("ec", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, pki: Path, user: str, server: str) -> None:
    """A self-contained kubeconfig (data embedded) for one client identity.

    JSON is valid YAML, so no YAML library is needed.
    """
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "dtjob-local",
                "cluster": {"server": server, "certificate-authority-data": _b64(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(pki / f"{user}.crt"),
                    "client-key-data": _b64(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "dtjob-local", "context": {"cluster": "dtjob-local", "user": user}}],
        "current-context": "dtjob-local",
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cfg, indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
