"""From API objects (plain JSON dicts) to what an admission pass reads. Pure.

The controller lists jobs, pods, nodes, ResourceQuotas and PriorityClasses; `build_snapshot`
folds them into JobViews (a job's gang, what of it exists, whether it is admitted), one
Quota per namespace and the Ready nodes with their free allocatable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from dtjob_api.status import TERMINAL_PHASES, JobPhase
from dtjob_operator.admission.fit import Node, PodDemand, Quota
from dtjob_operator.admission.resources import (
    Resources,
    add,
    parse_quantity,
    pod_host_ports,
    pod_requests,
    quota_amounts,
    subtract,
)
from dtjob_operator.admission.topology import TopologyRequest
from dtjob_operator.admission.usage import PodTally
from dtjob_operator.admission.usage import live as _live
from dtjob_operator.admission.view_memo import ViewMemo, versions_of
from dtjob_operator.builders import Job, build_pods
from dtjob_operator.builders.job import FULL_SIZE
from dtjob_operator.constants import (
    CONDITION_ADMITTED,
    LABEL_GENERATION,
    STATUS_TRUE,
)
from dtjob_operator.policies import node_blame
from dtjob_operator.policies.times import parse_time
from dtjob_operator.settings import OperatorSettings

Obj = Mapping[str, Any]
STARTED_PHASES = frozenset({JobPhase.STARTING.value, JobPhase.RUNNING.value})


@dataclass(frozen=True)
class GangPod:
    """One pod of a job's gang, as the builders would create it."""

    name: str
    demand: PodDemand
    priority_class: str | None


@dataclass(frozen=True)
class JobView:
    """A non-terminal, unsuspended job as the admission pass sees it."""

    uid: str
    namespace: str
    name: str
    priority: int
    created: str
    gang: tuple[PodDemand, ...]
    """Every pod of the current gang."""
    admitted: bool
    can_preempt: bool = True
    """False when its PriorityClass says preemptionPolicy: Never."""
    not_before: datetime | None = None
    """Re-queue backoff after a pods-ready timeout: not admitted before this."""
    missing: tuple[PodDemand, ...] = ()
    """Pods of the current gang that do not exist yet (an admitted job reserves them)."""
    unscheduled: tuple[PodDemand, ...] = ()
    """Live pods of the current gang without a node yet."""
    held: tuple[tuple[str | None, Mapping[str, int]], ...] = ()
    """(node, requests) of the job's live pods, any generation."""
    restarted: int | None = None
    """The gang generation of an admitted restarted gang that is not created yet while
    no pod of an older one is left: the pass checks it against the capacity of now."""
    pod_names: tuple[str, ...] = ()
    """The names of the gang's pods, in rank order (as `gang`)."""
    missing_names: tuple[str, ...] = ()
    """The names of the `missing` pods (as `missing`)."""
    topology: TopologyRequest | None = None
    """spec.placement.topology: the level the gang is packed into."""
    elastic_min: int | None = None
    """An elastic job's fewest pods (roles.worker.minReplicas): the gang's first n pods,
    for any n from it to len(gang), are a gang too."""
    elastic_max: int | None = None
    """An admitted elastic job below its maximum that may still grow: the most pods."""
    resizable_at: datetime | None = None
    """Not resized again before (its last resize or start + runPolicy.elastic's cooldown)."""
    cooldown: float = 0.0
    """runPolicy.elastic.cooldownSeconds: also how long room must have stayed free."""
    pod_nodes: tuple[str | None, ...] = ()
    """The node of each pod of the gang, in rank order (None: not created or not bound)."""
    draining: bool = False
    """Live pods of an older generation only: the gang is being replaced (a restart, a
    resize), its new pods not created yet."""

    @cached_property
    def need(self) -> Resources:
        """Requests of the whole gang (a view is kept across passes, and read many times
        in each: worked out once)."""
        return add(*(p.requests for p in self.gang))

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass
class Snapshot:
    """Everything one admission pass decides from."""

    jobs: list[JobView]
    quotas: dict[str, Quota]
    nodes: list[Node]
    now: datetime
    namespaces_used: dict[str, Resources] = field(default_factory=dict)
    topology_levels: tuple[str, ...] = ()
    """The cluster's topology as node labels, highest level first (settings)."""
    growable_since: dict[str, datetime] = field(default_factory=dict)
    """uid -> since when an elastic job has had room to grow (passes in a row)."""
    kept: dict[str, dict[str, str]] = field(default_factory=dict)
    """uid -> pod name -> node: where earlier passes placed pods not created yet."""
    resizing: dict[str, int] = field(default_factory=dict)
    """uid -> the size an earlier pass resized an elastic job to (in flight while its
    gang is not that size yet): a shrink is kept, not re-decided while the gang drains."""


def gang_pods(
    job: Obj, settings: OperatorSettings, size: int | None = None
) -> list[GangPod] | None:
    """The pods the builders would create for the job's current gang; None when the spec
    does not parse (the planner fails such a job; admission ignores it). `size`: the worker
    pods a pass admitted an elastic job with, before its status says so."""
    try:
        # A waiting elastic job is judged from its maximum down; an admitted one holds the
        # size it was given (status.elastic.replicas, or `size` until that is written).
        if size is None:
            size = None if is_admitted(job) else FULL_SIZE
        parsed = Job.from_object(job, size=size)
        restarts = int((job.get("status") or {}).get("restarts") or 0)
        manifests = build_pods(parsed, restarts, settings)
    except (ValueError, KeyError, TypeError):
        return None
    result = []
    for m in manifests:
        spec = m["spec"]
        demand = PodDemand(
            requests=pod_requests(spec),
            node_selector=dict(spec.get("nodeSelector") or {}),
            tolerations=tuple(spec.get("tolerations") or ()),
            host_ports=pod_host_ports(spec),
        )
        result.append(GangPod(m["metadata"]["name"], demand, spec.get("priorityClassName")))
    return result


def is_admitted(job: Obj) -> bool:
    """The job's status says it is admitted (or its gang already started)."""
    status = job.get("status") or {}
    if status.get("phase") in STARTED_PHASES:
        return True
    return any(
        c.get("type") == CONDITION_ADMITTED and c.get("status") == STATUS_TRUE
        for c in status.get("conditions") or []
    )


def requeue_not_before(
    job: Obj, base_seconds: float, max_seconds: float, parse: Callable[[object], datetime | None]
) -> datetime | None:
    """After a pods-ready timeout the job waits base * 2^(requeues-1) seconds (capped)."""
    admission = (job.get("status") or {}).get("admission") or {}
    requeues = int(admission.get("requeues") or 0)
    last = parse(admission.get("lastRequeueTime"))
    if requeues <= 0 or last is None:
        return None
    delay = min(base_seconds * 2 ** min(requeues - 1, 32), max_seconds)
    return last + timedelta(seconds=delay)


def topology_request(job: Obj) -> TopologyRequest | None:
    """spec.placement.topology as a request (the API validated it: one of the two)."""
    topology = ((job.get("spec") or {}).get("placement") or {}).get("topology") or {}
    for key, required in (("required", True), ("preferred", False)):
        if topology.get(key):
            return TopologyRequest(str(topology[key]), required)
    return None


def pinned_node(pod: Obj) -> str | None:
    """The node an admission's placement pinned the pod to: a `metadata.name In [node]`
    field term in every required node affinity term (kueue/verdict.pinned)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    names: set[str] | None = None
    for term in required.get("nodeSelectorTerms") or []:
        pins = {
            str(value)
            for field_ in term.get("matchFields") or []
            if field_.get("key") == "metadata.name" and field_.get("operator") == "In"
            and len(field_.get("values") or []) == 1
            for value in field_["values"]
        }  # fmt: skip
        names = pins if names is None else names & pins
    return next(iter(names)) if names and len(names) == 1 else None


def _owned(pod: Obj, uid: object) -> bool:
    """Owned by the job with `uid` (a pod without owner references goes by its label)."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return not refs or any(r.get("uid") == uid for r in refs)


def node_view(node: Obj) -> Node | None:
    """A Ready, schedulable node; None otherwise."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if spec.get("unschedulable"):
        return None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == STATUS_TRUE
        for c in status.get("conditions") or []
    )
    if not ready:
        return None
    alloc: Resources = {}
    for key, value in (status.get("allocatable") or {}).items():
        try:
            alloc[key] = parse_quantity(value, key)
        except ValueError:
            continue
    meta = node.get("metadata") or {}
    return Node(
        name=meta.get("name", ""),
        allocatable=alloc,
        free=dict(alloc),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(spec.get("taints") or ()),
    )


def priority_of(names: Iterable[str | None], classes: Sequence[Obj]) -> tuple[int, bool]:
    """(priority, may preempt) of the highest PriorityClass among `names`; a pod without a
    class gets the globalDefault class's value, else 0."""
    by_name = {c["metadata"]["name"]: c for c in classes}
    default = next((c for c in classes if c.get("globalDefault")), None)
    best: tuple[int, bool] | None = None
    for name in names:
        cls = by_name.get(name) if name else default
        value = (0, True)
        if cls is not None:
            value = (int(cls.get("value") or 0), cls.get("preemptionPolicy") != "Never")
        if best is None or value[0] > best[0]:
            best = value
    return best or (0, True)


def _spec_requests(pod: Obj) -> Resources:
    return pod_requests(pod.get("spec") or {})


def _spec_host_ports(pod: Obj) -> tuple[str, ...]:
    return pod_host_ports(pod.get("spec") or {})


def build_snapshot(
    *,
    jobs: Sequence[Obj],
    pods: Sequence[Obj],
    nodes: Sequence[Obj],
    quotas: Sequence[Obj],
    priority_classes: Sequence[Obj],
    gang_of: Callable[[Obj], Sequence[GangPod] | None],
    admitted: Callable[[Obj], bool],
    not_before: Callable[[Obj], datetime | None],
    now: datetime,
    requests_of: Callable[[Obj], Resources] | None = None,
    host_ports_of: Callable[[Obj], tuple[str, ...]] | None = None,
    topology_levels: Sequence[str] = (),
    last: frozenset[str] = frozenset(),
    memo: ViewMemo | None = None,
    tally: PodTally | None = None,
) -> Snapshot:
    """Fold the listed objects into a Snapshot (see the module docstring). `requests_of`
    gives a pod's requests (pod_requests of its spec unless given: the controller memoises
    it per pod version, parsing 10,000 pods' quantities was most of a pass), `host_ports_of`
    the ports it binds (pod_host_ports, likewise). Every gang
    avoids the nodes named in `last` (the cluster's suspect nodes), and they come after the
    others in the node order: a pod goes there only when no other node has room. `memo`
    keeps the JobViews between passes (ViewMemo): a job whose view's sources did not change
    is not viewed again; `tally` keeps the pods' shares between passes (usage.PodTally),
    so only the pods that changed are counted again."""
    # The pods' shares by namespace and node, and each job's pods: carried from the last
    # pass when the controller keeps a tally (only the pods that changed are counted again).
    tally = tally if tally is not None else PodTally()
    tally.update(pods, requests_of or _spec_requests, host_ports_of or _spec_host_ports)
    ns_used = tally.namespaces_used()
    node_used = tally.nodes_used()
    node_ports = tally.node_ports()
    by_job = tally.pods_by_job()
    requests = requests_of or _spec_requests

    ready_nodes = []
    for raw in nodes:
        node = node_view(raw)
        if node is not None:
            node.free = subtract(node.allocatable, node_used.get(node.name, {}))
            node.free.update(dict.fromkeys(node_ports.get(node.name, ()), 1))
            ready_nodes.append(node)
    ready_nodes.sort(key=lambda n: (n.name in last, n.name))

    folded: dict[str, Quota] = {}
    for q in quotas:
        ns = (q.get("metadata") or {}).get("namespace", "")
        hard = quota_amounts((q.get("spec") or {}).get("hard") or {})
        if not hard:
            continue
        reported = quota_amounts((q.get("status") or {}).get("used") or {})
        mine = ns_used.get(ns, {})
        used = {k: max(reported.get(k, 0), mine.get(k, 0)) for k in hard}
        room = subtract(hard, used)
        if ns in folded:
            prior = folded[ns]
            hard = {k: min(v, prior.hard.get(k, v)) for k, v in {**prior.hard, **hard}.items()}
            room = {k: min(v, prior.room.get(k, v)) for k, v in {**prior.room, **room}.items()}
        folded[ns] = Quota(hard=hard, room=room)

    views = []
    classes = versions_of(priority_classes)
    for job in jobs:
        if memo is not None and viewable(job):

            def build(j: Obj, gang: Sequence[GangPod] | None, yes: bool) -> JobView | None:
                return job_view(j, by_job, priority_classes, lambda _: gang, lambda _: yes,
                                not_before, requests)  # fmt: skip

            meta = job.get("metadata") or {}
            versions = tally.job_versions((meta.get("namespace", ""), meta.get("name", "")))
            view = memo.view(job, versions, classes, gang_of, admitted, build)
        else:
            view = job_view(job, by_job, priority_classes, gang_of, admitted, not_before, requests)
        # The nodes the gang keeps off: the job's own avoided nodes (status.avoidedNodes, as
        # of `now`: an avoidance expires while the job waits, its status unchanged) and the
        # cluster's suspects. Added each pass, after the memos: neither a gang nor a view
        # is rebuilt when only the clock moved.
        off = _avoided_nodes(job, now) | last if view is not None else frozenset()
        if view is not None and off:
            view = replace(view, gang=tuple(replace(p, avoid=p.avoid | off) for p in view.gang))
        if view is not None:
            views.append(view)
    if memo is not None:
        memo.next_pass()
    return Snapshot(jobs=views, quotas=folded, nodes=ready_nodes, now=now, namespaces_used=ns_used,
                    topology_levels=tuple(topology_levels))  # fmt: skip


def _avoided_nodes(job: Obj, now: datetime) -> frozenset[str]:
    """The job's unexpired avoided nodes (status.avoidedNodes; policies/node_blame.py)."""
    entries = (job.get("status") or {}).get("avoidedNodes")
    if not entries:  # nearly every job
        return frozenset()
    return frozenset(a.node for a in node_blame.read(entries, now))


def viewable(job: Obj) -> bool:
    """Not finished, suspended or being deleted: a job admission has to do with."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in TERMINAL_PHASES:
        return False
    return not (job.get("spec") or {}).get("suspend")


def job_view(
    job: Obj,
    pods_by_job: Mapping[tuple[str, str], Sequence[Obj]],
    priority_classes: Sequence[Obj],
    gang_of: Callable[[Obj], Sequence[GangPod] | None],
    admitted: Callable[[Obj], bool],
    not_before: Callable[[Obj], datetime | None],
    requests_of: Callable[[Obj], Resources] | None = None,
) -> JobView | None:
    """The job's view; None for a job admission has nothing to do with (finished,
    suspended, being deleted, or with a spec that does not parse)."""
    if not viewable(job):
        return None
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    gang = gang_of(job)
    if gang is None:
        return None
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    restarts = str(int(status.get("restarts") or 0))
    mine = [p for p in pods_by_job.get((ns, name), ()) if _owned(p, meta.get("uid"))]
    current = {
        p["metadata"]["name"]: p
        for p in mine
        if (p["metadata"].get("labels") or {}).get(LABEL_GENERATION) == restarts
    }
    live = [p for p in mine if _live(p)]
    priority, can_preempt = priority_of((g.priority_class for g in gang), priority_classes)
    is_admitted_now = admitted(job)
    # A running job out of resizes keeps its size: it can only be stopped whole.
    least = None if is_admitted_now and not _resizes_left(job) else elastic_min(job, len(gang))
    generation = int(restarts)
    # A Running gang was complete: a pod missing now has finished (finished pods are not
    # listed), so it reserves nothing.
    absent = (
        [] if status.get("phase") == JobPhase.RUNNING.value
        else [g for g in gang if g.name not in current]
    )  # fmt: skip
    restarted = (
        generation
        if is_admitted_now
        and generation > 0
        and not current
        and not live
        and status.get("phase") not in STARTED_PHASES
        else None
    )
    return JobView(
        uid=meta.get("uid", ""),
        namespace=ns,
        name=name,
        priority=priority,
        created=meta.get("creationTimestamp", ""),
        gang=tuple(g.demand for g in gang),
        admitted=is_admitted_now,
        can_preempt=can_preempt,
        not_before=not_before(job),
        missing=tuple(g.demand for g in absent),
        missing_names=tuple(g.name for g in absent),
        # A created pod waiting for the scheduler holds room where it was pinned, if it was.
        unscheduled=tuple(
            replace(g.demand, node_name=pinned_node(current[g.name]))
            for g in gang
            if g.name in current
            and _live(current[g.name])
            and not (current[g.name].get("spec") or {}).get("nodeName")
        ),
        held=tuple(
            ((p.get("spec") or {}).get("nodeName"), (requests_of or _spec_requests)(p))
            for p in live
        ),
        restarted=restarted,
        pod_names=tuple(g.name for g in gang),
        pod_nodes=tuple(
            ((current[g.name].get("spec") or {}).get("nodeName") if g.name in current else None)
            for g in gang
        ),
        draining=bool(live) and not any(_live(p) for p in current.values()),
        topology=topology_request(job),
        elastic_min=least,
        **(_growth(job, len(gang)) if is_admitted_now else {}),
    )


def _growth(job: Obj, pods: int) -> dict[str, Any]:
    """elastic_max and resizable_at of an admitted elastic job that may grow (below its
    maximum, resizes left, checkpoints on a claim), else none."""
    if elastic_min(job, pods + 1) is None:  # not elastic, or not a workers-only gang
        return {}
    spec, status = job.get("spec") or {}, job.get("status") or {}
    most = int(((spec.get("roles") or {}).get("worker") or {}).get("replicas") or 1)
    policy = (spec.get("runPolicy") or {}).get("elastic") or {}
    said = status.get("elastic") or {}
    # Growing restarts the gang: without a claim its checkpoints are in the pods' emptyDirs,
    # and the job would start over. Shrinking still beats being stopped whole.
    claim = (spec.get("checkpoint") or {}).get("claimName")
    if pods >= most or not _resizes_left(job) or not claim:
        return {}
    since = parse_time(said.get("lastResizeTime")) or parse_time(status.get("startTime"))
    cooldown = timedelta(seconds=int(policy.get("cooldownSeconds", 600)))
    return {"elastic_max": most, "resizable_at": since + cooldown if since else None,
            "cooldown": cooldown.total_seconds()}  # fmt: skip


def _resizes_left(job: Obj) -> bool:
    """Fewer resizes than runPolicy.elastic.maxResizes so far."""
    policy = ((job.get("spec") or {}).get("runPolicy") or {}).get("elastic") or {}
    said = (job.get("status") or {}).get("elastic") or {}
    return int(said.get("resizes") or 0) < int(policy.get("maxResizes", 10))


def elastic_min(job: Obj, pods: int) -> int | None:
    """roles.worker.minReplicas where the job is elastic and its gang is its workers alone
    (one pod per replica), and below the gang's size; else None."""
    roles = (job.get("spec") or {}).get("roles") or {}
    least = (roles.get("worker") or {}).get("minReplicas")
    if not isinstance(least, int) or set(roles) != {"worker"} or not 1 <= least < pods:
        return None
    return least
