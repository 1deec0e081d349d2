"""A lost peer is never the cause: wait a moment for the failure that is.

When one process of a gang fails, its peers in other pods lose it in the next collective and
exit 201 (the env contract's "lost a peer") at once, while the failing process's own pod may
take seconds longer to end (torchrun stops its other children first). A verdict taken on
the 201 alone would name the wrong pod and code, and would retry a failure whose own code
is permanent. So while the only failures are lost peers and another pod of the gang still
runs, the verdict waits, at most PEER_LOST_GRACE_SECONDS after the first of them ended.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from dtjob_operator.policies.failure_policy import EXIT_PEER_LOST, PodFailure
from dtjob_operator.policies.pods import Pod, is_finished

# torchrun gives a child 30 s to stop before it kills it; the failing pod ends by then.
PEER_LOST_GRACE_SECONDS = 35.0


def peer_lost_wait(decisive: PodFailure, gang: Iterable[Pod], now: datetime) -> float | None:
    """Seconds to wait before judging, or None to judge now: `decisive` is the failure the
    verdict would name (lost peers sort last, so it is one only when all are)."""
    if decisive.exit_code != EXIT_PEER_LOST or decisive.finished_at is None:
        return None
    if all(is_finished(p) for p in gang if p["metadata"]["name"] != decisive.pod):
        return None  # nobody left to fail otherwise
    until = decisive.finished_at + timedelta(seconds=PEER_LOST_GRACE_SECONDS)
    return (until - now).total_seconds() if now < until else None
