"""kopf wiring: watch events only enqueue job keys; the Reconciler does the work.

Handlers stay thin on purpose: kopf gives us watches, peering and the health endpoint, and
the work queue gives one-reconcile-per-job-at-a-time and collapses bursts of pod events.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from dtjob_operator.api import GROUP, PLURAL, VERSION
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.reconcile import Reconciler
from dtjob_operator.settings import OperatorSettings


def register(
    registry: kopf.OperatorRegistry, reconciler: Reconciler, settings: OperatorSettings
) -> None:
    """Register the operator's handlers on `registry`."""

    @kopf.on.startup(registry=registry)
    def on_startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Our handlers never fail, so kopf's own events about handler progress are noise.
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        reconciler.start(operator_settings.workers)
        if operator_settings.metrics_port:
            reconciler.metrics.serve(operator_settings.metrics_port)

    operator_settings = settings

    # A registry of our own has none of kopf's default login handlers: reuse the client's
    # configuration (in-cluster service account, else KUBECONFIG).
    @kopf.on.login(registry=registry)
    def on_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.cleanup(registry=registry)
    def on_cleanup(**_: Any) -> None:
        reconciler.stop()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def on_job_event(namespace: str | None, name: str, **_: Any) -> None:
        if namespace:
            reconciler.queue.add((namespace, name))

    @kopf.on.event("", "v1", "pods", labels={LABEL_JOB_NAME: kopf.PRESENT}, registry=registry)
    def on_pod_event(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
        if namespace:
            reconciler.queue.add((namespace, labels[LABEL_JOB_NAME]))

    # A quota raised (or lowered) changes what may be admitted, without restarting anything.
    @kopf.on.event("", "v1", "resourcequotas", registry=registry)
    def on_quota_event(**_: Any) -> None:
        reconciler.request_admission()

    # The trainer writes progress into a per-job ConfigMap; its change is a reason to look.
    @kopf.on.event("", "v1", "configmaps", labels={LABEL_JOB_NAME: kopf.PRESENT}, registry=registry)
    def on_config_map_event(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
        if namespace:
            reconciler.queue.add((namespace, labels[LABEL_JOB_NAME]))
