"""Connecting to the cluster the way kubectl does: an explicit kubeconfig or context, else
$KUBECONFIG, else the pod's service account (in-cluster), else ~/.kube/config. Each Client
gets its own ApiClient: nothing global is changed, so several clients (contexts) can live
in one notebook."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from dtjob_client.errors import ApiRefused, DtjobError

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def connect(
    kubeconfig: str | os.PathLike[str] | None, context: str | None
) -> tuple[client.ApiClient, str]:
    """An ApiClient and the default namespace (the context's, or the pod's, or default)."""
    env = os.environ.get("KUBECONFIG")
    in_cluster = (SA_DIR / "token").exists() and "KUBERNETES_SERVICE_HOST" in os.environ
    try:
        if kubeconfig is None and context is None and not env and in_cluster:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            namespace = (SA_DIR / "namespace").read_text().strip() or "default"
            return client.ApiClient(cfg), namespace
        path = str(kubeconfig) if kubeconfig else (env.split(os.pathsep)[0] if env else None)
        api = config.new_client_from_config(config_file=path, context=context)  # type: ignore[no-untyped-call]
        return api, _context_namespace(path, context)
    except (ConfigException, OSError) as exc:
        raise DtjobError(f"no usable Kubernetes configuration: {exc}") from None


def _context_namespace(path: str | None, context: str | None) -> str:
    contexts, active = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
    chosen = next((c for c in contexts if c["name"] == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def refused(exc: ApiException) -> ApiRefused:
    """The API server's own message (its Status object's), not the client's repr."""
    message = exc.reason or "refused"
    try:
        body = json.loads(exc.body or "{}")
        message = body.get("message") or message
    except (TypeError, ValueError):
        pass
    return ApiRefused(int(exc.status or 0), str(message))
