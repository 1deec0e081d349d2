"""The real node's image registry (distribution's cmd/registry) on 127.0.0.1: its address,
its config and containerd's for pulling from it, and its readiness. hack/realnode.py starts and
stops it with the node's other processes; hack/images.sh pushes to it."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from cluster_components import Config


def address(cfg: Config) -> str:
    """host:port of the node's registry; `hack/cluster.py registry` prints it."""
    return f"127.0.0.1:{cfg.port_base + 14}"


def write_configs(rd: Path, registry: str, cache: Path) -> None:
    """The registry's own config (registry.yml) and containerd's hosts.toml for it, under the
    real node's state directory `rd`."""
    (cache / "registry").mkdir(parents=True, exist_ok=True)
    # Storage in the cache: pushed layers (the trainer's are GBs) outlive the cluster.
    (rd / "registry.yml").write_text(f"""version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {cache / "registry"}
http:
  addr: {registry}
""")
    # containerd 1.6 reads hosts.toml per registry host under the CRI's config_path; http
    # because the registry serves only 127.0.0.1, where no certificate is needed.
    (rd / "certs.d" / registry / "hosts.toml").write_text(f"""server = "http://{registry}"
[host."http://{registry}"]
  capabilities = ["pull", "resolve"]
""")


def ready(registry: str) -> bool:
    """Whether the registry answers its API root."""
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # it is local
    try:
        with no_proxy.open(f"http://{registry}/v2/", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False
