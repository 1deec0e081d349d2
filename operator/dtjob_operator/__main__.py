"""`dtjob-operator` / `python -m dtjob_operator`: run the operator against the current cluster."""

from __future__ import annotations

import logging
import os
import socket

import kopf

from dtjob_operator import handlers
from dtjob_operator.k8s import KubeApi, load_client_config
from dtjob_operator.leader import LeaderElector
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
    api = KubeApi(load_client_config())
    elector: LeaderElector | None = None
    if not settings.standalone:
        namespace = (
            settings.leader_election_namespace or os.environ.get("POD_NAMESPACE") or "default"
        )
        identity = f"{socket.gethostname()}-{os.getpid()}"
        elector = LeaderElector(api, namespace, settings.peering_name, identity,
                                settings.leader_lease_seconds)  # fmt: skip
    reconciler = Reconciler(
        api, settings, OperatorMetrics(), elector.is_leader if elector else lambda: True
    )
    if elector is not None:
        elector.on_started_leading = reconciler.enqueue_all
        elector.start()
    registry = kopf.OperatorRegistry()
    handlers.register(registry, reconciler, settings)
    # kopf itself always runs standalone: every replica watches, and our Lease decides which
    # one acts (kopf's peering would pause watches but not our worker threads).
    kopf.run(
        registry=registry,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        liveness_endpoint=settings.liveness_endpoint or None,
        standalone=True,
        peering_name=None,
    )


if __name__ == "__main__":
    main()
