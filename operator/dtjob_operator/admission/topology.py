"""Topology-aware placement of one gang (pure; docs/admission.md, "Topology").

The cluster's topology is a list of node labels, highest level first (for example block,
rack, host). A domain of a level is the set of nodes with one value of its label; a node
without the label is in no domain of that level. Every node is a domain of its own below
the lowest level.

A gang is placed pod by pod in rank order onto concrete nodes, so that consecutive ranks
share a host, then a rack, then a block:
- **Inside one domain when one holds it: the best fit**, the domain with the least free
  room that still holds the whole gang, so that large free domains stay whole for large
  gangs (less fragmentation). Inside that domain the same rule applies one level down.
- **Across domains otherwise**, filling the roomiest domains first (the fewest domains),
  each taking the longest run of consecutive ranks it holds.

A request names a level: `required` places the gang inside one domain of it or nowhere;
`preferred` tries that level, then each level above it, then the whole cluster. Without a
request the gang goes to the lowest level that holds it (a host, else a rack, ...), else
across the cluster. Nodes a pod cannot use (selector, taints, room) are never chosen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dtjob_operator.admission.fit import Node, PodDemand, can_host, take
from dtjob_operator.admission.resources import CPU, MEMORY, Resources, accelerator_units

Free = dict[str, Resources]


@dataclass(frozen=True)
class TopologyRequest:
    """spec.placement.topology: a level (node label) and whether it is required."""

    level: str
    required: bool


@dataclass(frozen=True)
class GangPlacement:
    """Where each pod of the gang goes, in rank order, and the smallest domain that holds
    them all: (level, value), or None when the gang spans the cluster's top domains."""

    nodes: tuple[str, ...]
    domain: tuple[str, str] | None


def _room(free: Mapping[str, int]) -> tuple[int, int, int]:
    """How much a node or domain can still take: device units first (what is scarce)."""
    return (accelerator_units(free), free.get(CPU, 0), free.get(MEMORY, 0))


def _less(room: tuple[int, int, int]) -> tuple[int, int, int]:
    """A sort key that puts the roomiest first (names still break ties A to Z)."""
    return (-room[0], -room[1], -room[2])


def _domain_room(nodes: Sequence[Node], free: Free) -> tuple[int, int, int]:
    rooms = [_room(free[n.name]) for n in nodes]
    return (sum(r[0] for r in rooms), sum(r[1] for r in rooms), sum(r[2] for r in rooms))


def _need(pods: Sequence[PodDemand]) -> int:
    """The gang's device units: a domain with fewer free cannot hold it (a cheap test that
    skips the search, never one that decides a domain can). Only device units: a node that
    does not list cpu or memory is not limited in them, but has no device it does not list."""
    return sum(accelerator_units(p.requests) for p in pods)


def _short(room: tuple[int, int, int], need: int) -> bool:
    return room[0] < need


def avoided_nodes(pods: Sequence[PodDemand]) -> frozenset[str]:
    """The nodes any pod of the gang avoids (PodDemand.avoid): domains holding one come
    after every other, at each level, so they are used only when nothing else has room."""
    return frozenset().union(*(p.avoid for p in pods))


def _holds(domain: Sequence[Node], avoided: frozenset[str]) -> bool:
    return bool(avoided) and any(n.name in avoided for n in domain)


def _groups(nodes: Sequence[Node], level: str) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for node in nodes:
        value = node.labels.get(level)
        if value is not None:
            out.setdefault(value, []).append(node)
    return out


def _on_hosts(pods: Sequence[PodDemand], hosts: Sequence[Node], free: Free) -> list[str] | None:
    """Pods in rank order onto hosts: one host when one holds them all (the fullest such
    host), else the roomiest hosts first, each taking the next ranks while they fit. Hosts
    the gang avoids (PodDemand.avoid) come after every other, either way: a preference."""
    avoided = avoided_nodes(pods)
    by_room = sorted(hosts, key=lambda n: (n.name in avoided, _room(free[n.name]), n.name))
    for host in by_room:
        left = dict(free[host.name])
        for pod in pods:
            if not can_host(host, pod, left):
                break
            left = take(left, pod)
        else:
            return [host.name] * len(pods)
    out: list[str] = []
    order = sorted(hosts, key=lambda n: (n.name in avoided, _less(_room(free[n.name])), n.name))
    trial = {n.name: dict(free[n.name]) for n in hosts}
    at = 0
    for pod in pods:
        while at < len(order) and not can_host(order[at], pod, trial[order[at].name]):
            at += 1
        if at == len(order):
            return None
        name = order[at].name
        trial[name] = take(trial[name], pod)
        out.append(name)
    return out


def _within(
    pods: Sequence[PodDemand], nodes: Sequence[Node], levels: Sequence[str], free: Free
) -> list[str] | None:
    """Pods in rank order onto `nodes` (one domain), packed level by level below it."""
    if not pods:
        return []
    if not levels:
        return _on_hosts(pods, nodes, free)
    children = _groups(nodes, levels[0])
    rest = levels[1:]
    off = avoided_nodes(pods)
    by_room = sorted(
        children.values(), key=lambda c: (_holds(c, off), _domain_room(c, free), c[0].name)
    )
    need = _need(pods)
    for child in by_room:
        if _short(_domain_room(child, free), need):
            continue
        placed = _within(pods, child, rest, free)
        if placed is not None:
            return placed
    # Nodes without this level's label are in no domain of it, but may take ranks of a
    # gang spread over the cluster.
    loose = [n for n in nodes if levels[0] not in n.labels]
    roomiest = sorted(
        by_room, key=lambda c: (_holds(c, off), _less(_domain_room(c, free)), c[0].name)
    )
    spill = [*roomiest, *([loose] if loose else [])]
    return _spread(pods, spill, rest, free)


def _spread(
    pods: Sequence[PodDemand], domains: Sequence[Sequence[Node]], levels: Sequence[str], free: Free
) -> list[str] | None:
    """Consecutive runs of ranks onto the domains in the order given (roomiest first):
    each takes the longest run it holds."""
    out: list[str] = []
    trial = {k: dict(v) for k, v in free.items()}
    start = 0
    for domain in domains:
        if start == len(pods):
            break
        lo, hi, best = 0, len(pods) - start, None
        room = _domain_room(domain, trial)
        while hi > 0 and _short(room, _need(pods[start : start + hi])):
            hi -= 1  # no longer run can fit the domain's free room
        while lo < hi:  # the longest run that fits (a shorter run fits whenever a longer does)
            mid = (lo + hi + 1) // 2
            placed = _within(pods[start : start + mid], domain, levels, trial)
            if placed is not None:
                lo, best = mid, placed
            else:
                hi = mid - 1
        if best:
            for pod, name in zip(pods[start : start + lo], best, strict=True):
                trial[name] = take(trial[name], pod)
            out += best
            start += lo
    return out if start == len(pods) else None


def _smallest_domain(
    names: Sequence[str], nodes: Sequence[Node], levels: Sequence[str]
) -> tuple[str, str] | None:
    labels = {n.name: n.labels for n in nodes}
    for level in reversed(levels):
        values = {labels[name].get(level) for name in names}
        if len(values) == 1 and None not in values:
            return level, str(values.pop())
    return None


def place_gang(
    pods: Sequence[PodDemand],
    nodes: Sequence[Node],
    levels: Sequence[str],
    request: TopologyRequest | None = None,
) -> GangPlacement | None:
    """The gang's placement (see the module docstring), or None where it has none. The
    nodes' free room is not changed: commit() takes it."""
    free: Free = {n.name: dict(n.free) for n in nodes}
    levels = [lv for lv in levels if lv]
    if request is not None and request.level not in levels:
        levels = [*levels, request.level]  # a level the admin did not list still packs
    if request is None:
        tries = list(range(len(levels) - 1, -1, -1))  # the lowest level first
    else:
        at = levels.index(request.level)
        tries = [at] if request.required else list(range(at, -1, -1))
    need = _need(pods)
    for i in tries:
        # Best fit over the whole level. Best fit level by level (the fullest block, then
        # rack, then host) was tried: more gangs in one rack on one trace, longer waits on
        # all three (bench/placement.py, docs/design/topology-admission.md).
        off = avoided_nodes(pods)
        domains = sorted(_groups(nodes, levels[i]).items(),
                         key=lambda kv: (_holds(kv[1], off), _domain_room(kv[1], free),
                                         kv[0]))  # fmt: skip
        for _, domain in domains:
            if _short(_domain_room(domain, free), need):
                continue
            placed = _within(pods, domain, levels[i + 1 :], free)
            if placed is not None:
                return GangPlacement(tuple(placed), _smallest_domain(placed, nodes, levels))
    if request is not None and request.required:
        return None
    placed = _within(pods, nodes, levels, free)
    if placed is None:
        return None
    return GangPlacement(tuple(placed), _smallest_domain(placed, nodes, levels))


def on_nodes(names: Sequence[str], nodes: Sequence[Node], levels: Sequence[str]) -> GangPlacement:
    """A gang already given these nodes (in rank order), with the domain they share."""
    return GangPlacement(tuple(names), _smallest_domain(names, nodes, [lv for lv in levels if lv]))


def describe(placement: GangPlacement) -> str:
    """Where the gang went, for the job's status: its smallest domain ("<level>=<value>"),
    else how many nodes it spans."""
    if placement.domain is not None:
        return f"{placement.domain[0]}={placement.domain[1]}"
    return f"{len(set(placement.nodes))} nodes in no common domain"


def commit(placement: GangPlacement, pods: Sequence[PodDemand], nodes: Sequence[Node]) -> None:
    """Take the gang's requests off the nodes it was placed on."""
    by_name = {n.name: n for n in nodes}
    for pod, name in zip(pods, placement.nodes, strict=True):
        node = by_name[name]
        node.free = take(node.free, pod)
