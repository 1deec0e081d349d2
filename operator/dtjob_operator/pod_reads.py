"""What a reconcile pass reads about a job's pods beyond the pods themselves, only when a
pod asks for it: the last states of members that vanished unseen (gone_pods.py), the lost
nodes among those of pods on their way out, and the Events of pods stuck creating. In
nearly every pass none of it costs a request."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from dtjob_operator.caches import Caches
from dtjob_operator.k8s import KubeApi, Obj
from dtjob_operator.kubehttp import ApiException
from dtjob_operator.policies.nodes import (
    GANG_UP_PHASES,
    confirmed_lost,
    lost_nodes,
    vanished_members,
)
from dtjob_operator.policies.ownership import owned_by
from dtjob_operator.policies.pods import Pod, is_terminating, name_of, node_of
from dtjob_operator.policies.waiting import pods_to_ask

log = logging.getLogger(__name__)


class PodReads:
    """The reads, over the operator's caches and API client; `pool` runs per-pod calls."""

    def __init__(self, api: KubeApi, caches: Caches, pool: ThreadPoolExecutor) -> None:
        self.api, self.caches, self._pool = api, caches, pool

    def vanished(self, job: Obj, pods: list[Obj]) -> list[Pod]:
        """While the gang is up, the last states of its members that are gone without the
        reconcile having seen them go (gone_pods.py); none in nearly every pass."""
        status = job.get("status") or {}
        if status.get("phase") not in GANG_UP_PHASES:
            return []
        meta = job["metadata"]
        gone = self.caches.gone_pods.of(meta["namespace"], meta["name"])
        mine = [p for p in gone if owned_by(p, meta["uid"])]
        vanished = vanished_members(mine, pods, int(status.get("restarts") or 0))
        for pod in vanished:
            log.info("%s/%s: member %s vanished unseen; judged by its last state (node %s)",
                     meta["namespace"], meta["name"], name_of(pod), node_of(pod))  # fmt: skip
        return vanished

    def lost_nodes(self, job: Obj, pods: list[Obj], gone: list[Pod]) -> frozenset[str]:
        """Lost nodes among those of the job's terminating or vanished pods: only a pod on
        its way out needs its node's word, so a healthy pass lists no nodes. While the gang
        is up, a node the cache still calls Ready is read from the API server: the node's
        watch event may lag the pod's (policies/nodes.py `confirmed_lost`)."""
        wanted = {node for p in pods if is_terminating(p) and (node := node_of(p))}
        wanted |= {node for p in gone if (node := node_of(p))}
        if not wanted:
            return frozenset()
        lost = lost_nodes(wanted, self.caches.list_nodes())
        if (job.get("status") or {}).get("phase") not in GANG_UP_PHASES:
            return lost
        return lost | confirmed_lost(wanted - lost, self.api.get_node)

    def events(self, job: Obj, pods: list[Obj]) -> dict[str, list[Obj]]:
        """The Events of the gang's pods that hang in ContainerCreating: a volume that cannot
        be mounted or attached is said only there. One list per such pod (concurrently);
        none at all in a pass where no pod waits so, which is nearly every pass."""
        names = pods_to_ask(job, pods)
        if not names:
            return {}
        namespace = job["metadata"]["namespace"]
        uids = {name_of(p): p["metadata"].get("uid") for p in pods}
        try:
            found = self._pool.map(
                lambda n: self.api.list_pod_events(namespace, n, uids.get(n)), names
            )
            return dict(zip(names, found, strict=True))
        except ApiException as exc:
            # Only the answer to "why" is lost (e.g. a chart without events list): the job
            # still shows PodsNotReady, and the pass goes on.
            log.warning("listing events of %s/%s's pods refused: %s %s",
                        namespace, job["metadata"]["name"], exc.status, exc.reason)  # fmt: skip
            return {}
