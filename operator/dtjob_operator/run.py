"""The operator's process: settings, the API client, the reconciler, kopf's watches
(started by `dtjob-operator` / `python -m dtjob_operator`, __main__.py)."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time

import kopf

from dtjob_operator import handlers
from dtjob_operator.api_client import load_client_config, request_kind
from dtjob_operator.health import serve_liveness
from dtjob_operator.k8s import KubeApi
from dtjob_operator.leader import LeaderElector
from dtjob_operator.metrics import OperatorMetrics
from dtjob_operator.ratelimit import TokenBucket
from dtjob_operator.reconcile import Reconciler
from dtjob_operator.settings import OperatorSettings

log = logging.getLogger("dtjob_operator")

# The API server stores objects nested up to 10,000 levels (its JSON decoder's limit). The C
# JSON decoder counts nesting against Python's recursion limit (1,000 by default), so at the
# default one such object would make every list or watch that returns it raise
# RecursionError, for every job. With this limit anything the API server can store decodes;
# the planner then refuses the deep job alone (settings.max_object_depth). Threads get a
# larger stack so that the C recursion this allows fits in it.
RECURSION_LIMIT = 50_000
THREAD_STACK_BYTES = 64 * 1024 * 1024

# How long to wait before starting kopf's watches again after they stopped on an error.
KOPF_RESTART_DELAY = 5.0
# kopf's loop beats every 5 s (handlers.LOOP_BEAT_SECONDS); this much silence means stuck.
LOOP_SILENT_SECONDS = 60.0


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
    # Each retry of a refused connection is a WARNING with a long line; our own log says
    # once per reconcile that the API server is unreachable.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    threading.stack_size(THREAD_STACK_BYTES)
    api_client = load_client_config(
        (settings.api_connect_timeout_seconds, settings.api_read_timeout_seconds),
        TokenBucket(settings.api_qps, settings.api_burst),
    )
    api = KubeApi(api_client, settings.api_list_page_size)
    elector: LeaderElector | None = None
    if not settings.standalone:
        namespace = (
            settings.leader_election_namespace or os.environ.get("POD_NAMESPACE") or "default"
        )
        identity = f"{socket.gethostname()}-{os.getpid()}"
        elector = LeaderElector(api, namespace, settings.peering_name, identity,
                                settings.leader_lease_seconds)  # fmt: skip
        # The single write guard: a replica that does not lead sends no write at all.
        api_client.may_write = elector.is_leader
    reconciler = Reconciler(
        api,
        settings,
        OperatorMetrics(settings.job_metrics_limit),
        elector.is_leader if elector else lambda: True,
    )
    api_client.on_recovered = reconciler.on_api_recovered
    api_client.on_request = lambda method, url: reconciler.metrics.api_requests.labels(
        *request_kind(method, url)
    ).inc()
    reconciler.start(settings.workers)
    if settings.metrics_port:
        reconciler.metrics.serve(settings.metrics_port)
    if settings.liveness_endpoint:
        serve_liveness(
            settings.liveness_endpoint,
            lambda: reconciler.heartbeats.verdict(
                settings.liveness_stuck_seconds, LOOP_SILENT_SECONDS
            ),
            ready=lambda: reconciler.heartbeats.readiness(LOOP_SILENT_SECONDS),
        )
    if elector is not None:
        elector.on_started_leading = reconciler.enqueue_all
        elector.on_stopped_leading = reconciler.on_lost_leadership
        elector.start()
    registry = kopf.OperatorRegistry()
    handlers.register(registry, reconciler, settings)
    try:
        run_kopf(registry, settings)
    finally:
        if elector is not None:
            elector.stop()
        reconciler.stop()


def run_kopf(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Run kopf until a signal stops it. kopf stops as a whole when any one watch fails
    (an error it does not retry, an object it cannot handle): then its watches are started
    again, which re-lists every watched object, while the reconcile workers keep going."""
    while True:
        try:
            # kopf itself always runs standalone: every replica watches, and our Lease decides
            # which one acts (kopf's peering would pause watches but not our worker threads).
            kopf.run(
                registry=registry,
                clusterwide=not settings.namespaces,
                namespaces=settings.namespaces,
                liveness_endpoint=None,  # ours (health.py) also sees the workers
                standalone=True,
                peering_name=None,
            )
        except Exception:
            log.exception("kopf's watches stopped on an error; restarting them in %.0fs",
                          KOPF_RESTART_DELAY)  # fmt: skip
            time.sleep(KOPF_RESTART_DELAY)
        else:
            return  # SIGTERM or SIGINT: kopf stopped as asked
