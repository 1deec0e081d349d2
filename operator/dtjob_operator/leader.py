"""Leader election through a coordination.k8s.io Lease, so that of several operator
replicas exactly one reconciles and admits at a time (the others only watch).

The leader renews the Lease every third of its duration. It stops acting as leader once
two thirds of the duration have passed since its last successful renewal, while another
replica takes over only after the whole duration has passed since the last renewTime it
can see: so there is always a gap, never an overlap, even when the API server is slow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from kubernetes.client.exceptions import ApiException

from dtjob_operator.k8s import KubeApi, Obj
from dtjob_operator.policies.times import parse_time

log = logging.getLogger(__name__)


def _micro_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Holds (or waits for) the Lease `name` in `namespace` on a thread of its own."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float,
        on_started_leading: Callable[[], None] = lambda: None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.on_started_leading = on_started_leading
        self._valid_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def is_leader(self) -> bool:
        return time.monotonic() < self._valid_until

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            was_leader = self.is_leader()
            started = time.monotonic()
            try:
                held = self.try_acquire_or_renew()
            except ApiException as exc:
                log.warning("leader election: API error %s %s", exc.status, exc.reason)
                held = False
            if held:
                self._valid_until = started + self.lease_seconds * 2 / 3
                if not was_leader:
                    log.info("leader election: %s leads (Lease %s/%s)", self.identity,
                             self.namespace, self.name)  # fmt: skip
                    self.on_started_leading()
            elif was_leader:
                log.warning("leader election: %s lost the Lease", self.identity)
                self._valid_until = 0.0
            self._stop.wait(self.lease_seconds / 3)

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this replica holds the Lease afterwards."""
        now = datetime.now(UTC)
        lease = self.api.get_lease(self.namespace, self.name)
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_seconds)),
            "renewTime": _micro_time(now),
        }
        if lease is None:
            body: Obj = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**spec, "acquireTime": _micro_time(now), "leaseTransitions": 0},
            }
            return self.api.create_lease(self.namespace, body)
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity")
        if holder != self.identity:
            renewed = parse_time(current.get("renewTime")) or datetime.min.replace(tzinfo=UTC)
            duration = float(current.get("leaseDurationSeconds") or self.lease_seconds)
            if holder and now < renewed + timedelta(seconds=duration):
                return False  # someone else leads
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**current, **spec}
        return self.api.replace_lease(self.namespace, lease)
