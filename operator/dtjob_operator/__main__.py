"""`dtjob-operator` / `python -m dtjob_operator`: run the operator against the current cluster."""

from __future__ import annotations

import logging

import kopf

from dtjob_operator import handlers
from dtjob_operator.k8s import KubeApi, load_client_config
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.reconcile import Reconciler
from dtjob_operator.settings import OperatorSettings


def main() -> None:
    """Build the settings once, wire the handlers, and hand control to kopf."""
    settings = OperatorSettings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # kopf logs every handler call at INFO; ours only enqueue, so that is noise.
    logging.getLogger("kopf").setLevel(
        max(logging.WARNING, logging.getLevelName(settings.log_level))
    )
    reconciler = Reconciler(KubeApi(load_client_config()), settings, OperatorMetrics())
    registry = kopf.OperatorRegistry()
    handlers.register(registry, reconciler, settings)
    kopf.run(
        registry=registry,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        liveness_endpoint=settings.liveness_endpoint or None,
        standalone=settings.standalone,
        # A peering name makes peering mandatory in kopf, which would pause a standalone
        # operator forever waiting for the peering CRD.
        peering_name=None if settings.standalone else settings.peering_name,
    )


if __name__ == "__main__":
    main()
