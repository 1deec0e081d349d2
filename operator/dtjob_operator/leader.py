"""Leader election through a coordination.k8s.io Lease, so that of several operator
replicas exactly one reconciles and admits at a time (the others only watch).

The leader renews the Lease every third of its duration. It stops acting as leader once
two thirds of the duration have passed since the start of its last successful renewal, by
its own monotonic clock. Another replica never compares the Lease's renewTime with its own
wall clock (clocks of two machines may disagree by minutes): like client-go, it remembers
when, by its own monotonic clock, it last saw the Lease record change, and takes over only
when the record has not changed for a whole leaseDuration since. So there is always a gap,
never an overlap, whatever the clocks say.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from dtjob_operator.k8s import KubeApi, Obj

log = logging.getLogger(__name__)


def _micro_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# What makes a Lease record "changed" for another replica (client-go compares the same).
LEASE_RECORD_FIELDS = (
    "holderIdentity",
    "renewTime",
    "acquireTime",
    "leaseTransitions",
    "leaseDurationSeconds",
)


class LeaseObserver:
    """When (by the local monotonic `clock`) the Lease record was last seen to change."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._record: tuple[object, ...] | None = None
        self._changed_at = 0.0

    def observe(self, spec: Obj) -> None:
        """Note the Lease spec as read now; the timer restarts only when it differs."""
        record = tuple(spec.get(k) for k in LEASE_RECORD_FIELDS)
        if record != self._record:
            self._record = record
            self._changed_at = self.clock()

    def expired(self, duration: float) -> bool:
        """True when the record has not changed for `duration` seconds of our own clock."""
        return self._record is not None and self.clock() >= self._changed_at + duration


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
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.on_started_leading = on_started_leading
        self.on_stopped_leading: Callable[[], None] = lambda: None
        self.clock = clock
        # Only written into the Lease for people to read; never compared with anything.
        self.wall_clock = wall_clock
        self.observer = LeaseObserver(clock)
        self._leading = False
        self._valid_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def is_leader(self) -> bool:
        return self.clock() < self._valid_until

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.round()
            self._stop.wait(self.lease_seconds / 3)

    def round(self) -> bool:
        """Acquire or renew once, and tell the callbacks when leadership began or ended."""
        if self._leading and not self.is_leader():
            self._stopped_leading("its last renewal is too old")
        started = self.clock()
        try:
            held = self.try_acquire_or_renew()
        except Exception as exc:  # API errors, timeouts, the API server gone
            log.warning("leader election: renewal failed: %s", exc)
            held = False
        if held:
            self._valid_until = started + self.lease_seconds * 2 / 3
            if not self._leading:
                self._leading = True
                log.info("leader election: %s leads (Lease %s/%s)", self.identity,
                         self.namespace, self.name)  # fmt: skip
                self.on_started_leading()
        elif self._leading:
            self._stopped_leading("the Lease could not be renewed")
        return held

    def _stopped_leading(self, why: str) -> None:
        log.warning("leader election: %s stopped leading: %s", self.identity, why)
        self._leading = False
        self._valid_until = 0.0
        self.on_stopped_leading()

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this replica holds the Lease afterwards."""
        now = self.wall_clock()
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
            if not self.api.create_lease(self.namespace, body):
                return False
            self.observer.observe(body["spec"])
            return True
        current = lease.get("spec") or {}
        self.observer.observe(current)
        holder = current.get("holderIdentity")
        if holder != self.identity:
            duration = float(current.get("leaseDurationSeconds") or self.lease_seconds)
            if holder and not self.observer.expired(duration):
                return False  # someone else leads (or did until very recently)
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**current, **spec}
        if not self.api.replace_lease(self.namespace, lease):
            return False
        self.observer.observe(lease["spec"])
        return True
