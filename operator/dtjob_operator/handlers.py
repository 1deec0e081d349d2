"""kopf wiring: watch events only enqueue job keys; the Reconciler does the work.

Handlers stay thin on purpose: kopf gives us watches, peering and the health endpoint, and
the work queue gives one-reconcile-per-job-at-a-time and collapses bursts of pod events.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import kopf

from dtjob_api import GROUP, PLURAL, VERSION
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.kubeconfig import ClusterAccess
from dtjob_operator.reconcile import Reconciler
from dtjob_operator.settings import OperatorSettings

LOOP_BEAT_SECONDS = 5.0

# What kopf itself calls for the handlers below: a list then a watch of the jobs, namespaces
# and CRDs (it follows them coming and going), and events it posts. With k8s.API_CALLS and
# caches.CACHE_CALLS, all the chart grants (tests/unit/operator/test_chart.py). Pods,
# ConfigMaps and ResourceQuotas are watched by the caches (kopf watches them only when
# settings.informers is off, with the same verbs).
KOPF_CALLS: frozenset[tuple[str, str, str]] = frozenset(
    {
        *((group, resource, verb)
          for group, resource in ((GROUP, PLURAL), ("", "namespaces"),
                                  ("apiextensions.k8s.io", "customresourcedefinitions"))
          for verb in ("list", "watch")),
        ("", "events", "create"),
    }
)  # fmt: skip


class EndlessBackoffs:
    """Retry delays for kopf's API requests that never run out (1, 1, 2, 3, 5, 8, then
    `cap` seconds for ever). kopf gives up on a request after its last backoff and the
    failed watcher then stops the whole operator; ours must outlive any outage. Iterable
    afresh for each request, and not Sized, so kopf never counts the attempts down."""

    def __init__(self, cap: float) -> None:
        self.cap = cap

    def __iter__(self) -> Iterator[float]:
        return itertools.chain((1, 1, 2, 3, 5, 8), itertools.repeat(self.cap))


def configure_kopf(kopf_settings: kopf.OperatorSettings, settings: OperatorSettings) -> None:
    """Timeouts and retries of kopf's own API calls and watches."""
    # Our handlers never fail, so kopf's own events about handler progress are noise.
    kopf_settings.posting.level = logging.WARNING
    connect, read = settings.api_connect_timeout_seconds, settings.api_read_timeout_seconds
    kopf_settings.networking.connect_timeout = connect
    kopf_settings.networking.request_timeout = read
    kopf_settings.networking.error_backoffs = EndlessBackoffs(cap=10)
    kopf_settings.watching.connect_timeout = connect
    # The API server ends each watch after server_timeout; the client gives it some slack
    # and re-opens a watch that has been silent too long (a half-open connection).
    kopf_settings.watching.server_timeout = 300
    kopf_settings.watching.client_timeout = 330
    kopf_settings.watching.inactivity_timeout = settings.watch_inactivity_seconds
    kopf_settings.watching.reconnect_backoff = 1.0
    # With the caches kopf watches nothing of ours (register), so its scanning of the
    # cluster serves nothing: a watch of every CRD, which keeps the last CRD it listed for as
    # long as it runs (ours alone is 2.3 MB of schema), and of every namespace, with a new
    # discovery of a whole API group each time a CRD changes. Off, the operator is about
    # 2 MiB smaller, fresh and after a burst of gangs (docs/operator-scale.md, "Memory").
    # Without the caches kopf's own watches need it, namespace patterns included.
    kopf_settings.scanning.disabled = settings.informers


def connection_info(access: ClusterAccess) -> kopf.ConnectionInfo:
    """kopf's credentials, from ours. kopf logs in again after a 401: a rotating token
    (service account, exec plugin) is fetched anew for it."""
    access.expire_token()
    token = access.bearer()
    return kopf.ConnectionInfo(
        server=access.server, ca_path=access.ca_file, ca_data=access.ca_data,
        insecure=access.insecure or None, scheme="Bearer" if token else None, token=token,
        certificate_path=access.cert_file, certificate_data=access.cert_data,
        private_key_path=access.key_file, private_key_data=access.key_data,
        default_namespace=access.namespace, proxy_url=access.proxy_url,
    )  # fmt: skip


def register(
    registry: kopf.OperatorRegistry, reconciler: Reconciler, settings: OperatorSettings
) -> None:
    """Register the operator's handlers on `registry` (the reconciler runs on its own: it is
    started before kopf and stopped after it, so a restart of kopf's watches leaves it be)."""

    @kopf.on.startup(registry=registry)
    def on_startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_kopf(settings, operator_settings)

    # The liveness probe's proof that kopf's event loop (every watch) is still running.
    beats: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start_loop_heartbeat(**_: Any) -> None:
        async def beat() -> None:
            while True:
                reconciler.heartbeats.loop_beat()
                await asyncio.sleep(LOOP_BEAT_SECONDS)

        beats.append(asyncio.get_running_loop().create_task(beat(), name="dtjob heartbeat"))

    operator_settings = settings

    # A registry of our own has none of kopf's default login handlers: kopf's watches use
    # the same access as the operator's own calls (in-cluster service account, else
    # KUBECONFIG; kubeconfig.py).
    @kopf.on.login(registry=registry)
    def on_login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(reconciler.api.api_client.access)

    if settings.informers:
        # The caches' watches wake the reconciles: the jobs' (caches.py, job_changed), their
        # pods' and ConfigMaps', the quotas'. kopf watches nothing then. Its watch of the
        # jobs was a second one: every job event parsed twice, and kopf's processing of
        # each (its diff-base of the object, deep copies) was 44 % of the operator's CPU
        # in a burst of gang creations (py-spy --gil, bench/operator_scale.py --only burst).
        return

    # Without the caches: kopf streams the jobs, every pod and ConfigMap, and the quotas.
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def on_job_event(
        namespace: str | None, name: str, uid: str | None, type: str | None, **_: Any
    ) -> None:
        if namespace:
            reconciler.caches.saw_job(namespace, name, None if type == "DELETED" else uid)
            reconciler.queue.add((namespace, name))

    # kopf filters the pods and ConfigMaps by label here.
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
