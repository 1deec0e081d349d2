"""Why a gang can never be placed, naming the real blocker.

"The Ready nodes could not hold them even if empty" is true but useless when the job's
nodeSelector matches no node at all, or every matching node has a taint the job does not
tolerate, or the pod asks for more CPU than any node has: the user would go hunting for GPUs.
So the first pod that fits on no empty node is examined filter by filter, in the
scheduler's order: nodeSelector, then taints, then each resource; the first filter that
leaves no node is the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dtjob_operator.admission.fit import Node, PodDemand, tolerates
from dtjob_operator.admission.resources import accelerator_units, format_amount, is_extended

MAX_SHOWN = 3


def never_fits(gang: Sequence[PodDemand], nodes: Sequence[Node]) -> str | None:
    """What excludes every node for some pod of the gang, or None when each pod alone
    would fit on some empty node (then only the gang as a whole is too big)."""
    for pod in sorted(gang, key=lambda p: accelerator_units(p.requests), reverse=True):
        why = _excluded(pod, nodes)
        if why is not None:
            return why
    return None


def usable_nodes(gang: Sequence[PodDemand], nodes: Sequence[Node]) -> list[Node]:
    """The nodes some pod of the gang may land on (nodeSelector and taints; resources aside):
    the only ones whose size matters to it."""
    return [n for n in nodes if any(_may_use(p, n) for p in gang)]


def _may_use(pod: PodDemand, node: Node) -> bool:
    return all(node.labels.get(k) == v for k, v in pod.node_selector.items()) and all(
        tolerates(pod.tolerations, t) for t in node.taints
    )


def _excluded(pod: PodDemand, nodes: Sequence[Node]) -> str | None:
    n = len(nodes)
    for res in sorted(r for r, v in pod.requests.items() if v > 0 and is_extended(r)):
        if not any(node.allocatable.get(res, 0) for node in nodes):
            return (
                f"no Ready node advertises {res} (of {n}): is the device plugin installed, or "
                "are those nodes NotReady or cordoned?"
            )
    selected = [
        node for node in nodes if all(node.labels.get(k) == v for k, v in pod.node_selector.items())
    ]
    if not selected:
        selector = ", ".join(f"{k}={v}" for k, v in sorted(pod.node_selector.items()))
        return (
            f"its nodeSelector ({selector}) matches none of the {n} Ready nodes: fix the "
            "nodeSelector in the role's template or label a node"
        )
    tolerated = [
        node for node in selected if all(tolerates(pod.tolerations, t) for t in node.taints)
    ]
    if not tolerated:
        taints = sorted(
            {
                _taint(t)
                for node in selected
                for t in node.taints
                if not tolerates(pod.tolerations, t)
            }
        )
        return (
            f"the {len(selected)} Ready nodes its nodeSelector allows all have taints it does not "
            f"tolerate ({', '.join(taints[:MAX_SHOWN])}"
            f"{' ...' if len(taints) > MAX_SHOWN else ''}): add a toleration to the role's template"
        )
    for resource, amount in sorted(pod.requests.items()):
        biggest = max(node.allocatable.get(resource, 0) for node in tolerated)
        if amount > biggest:
            return (
                f"a pod needs {format_amount(amount, resource)} {resource} and the largest of "
                f"the {len(tolerated)} Ready nodes it may use has "
                f"{format_amount(biggest, resource)}: lower the request or add a bigger node"
            )
    return None


def _taint(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"
