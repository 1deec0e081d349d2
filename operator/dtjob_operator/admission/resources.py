"""Resource amounts as integers: cpu in millicores, memory in bytes, the rest in units.

Admission compares sums of pod requests with quota room and node free space; integers keep
that exact (no float drift over hundreds of pods).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"

Resources = dict[str, int]

# ResourceQuota keys the admission understands, and the pod resource each one limits;
# besides these, every `requests.<name>` (extended resources: requests.amd.com/gpu,
# requests.rdma/hca_shared_devices_a, hugepages: requests.hugepages-2Mi), see quota_resource.
QUOTA_KEYS: Mapping[str, str] = {
    f"requests.{GPU}": GPU,
    "requests.cpu": CPU,
    "cpu": CPU,
    "requests.memory": MEMORY,
    "memory": MEMORY,
    "count/pods": PODS,
    "pods": PODS,
}

_SUFFIX: Mapping[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: object, resource: str) -> int:
    """A Kubernetes quantity as an integer in the resource's unit (cpu: millicores),
    rounded up as the API server does; raises ValueError on anything else."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    amount = Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    if resource == CPU:
        amount *= 1000
    return math.ceil(amount)


def format_amount(amount: int, resource: str) -> str:
    """The amount the way a person writes it: cpu "2" or "500m", memory "16Gi"."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource == MEMORY:
        for suffix in ("Ti", "Gi", "Mi", "Ki"):
            factor = int(_SUFFIX[suffix])
            if amount >= factor and amount % factor == 0:
                return f"{amount // factor}{suffix}"
    return str(amount)


def add(*amounts: Mapping[str, int]) -> Resources:
    """Sum per resource."""
    total: Resources = {}
    for amount in amounts:
        for key, value in amount.items():
            total[key] = total.get(key, 0) + value
    return total


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """a - b per resource of a (may go negative: more used than the quota allows)."""
    return {key: value - b.get(key, 0) for key, value in a.items()}


def covers(free: Mapping[str, int], need: Mapping[str, int]) -> bool:
    """True when every resource `free` knows of has room for `need` (resources `free` does
    not list are not limited)."""
    return all(need.get(key, 0) <= value for key, value in free.items() if need.get(key, 0) > 0)


def node_covers(free: Mapping[str, int], need: Mapping[str, int]) -> bool:
    """A node has room for `need`: like covers(), but an extended resource the node does
    not list is one it does not have (a pod asking for rdma/x cannot go there)."""
    return covers(free, need) and all(
        value <= free.get(key, 0) for key, value in need.items() if value > 0 and is_extended(key)
    )


def is_gpu(resource: str) -> bool:
    """A GPU of any vendor or a MIG slice: nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915,
    nvidia.com/mig-1g.10gb (device plugins name them so; RoleSpec.gpuResource)."""
    return "/" in resource and ("gpu" in resource or "/mig-" in resource)


def gpu_units(requests: Mapping[str, int]) -> int:
    """GPUs (and MIG slices) of any vendor in `requests`."""
    return sum(value for key, value in requests.items() if is_gpu(key))


def accelerator_units(requests: Mapping[str, int]) -> int:
    """Device-plugin units of a pod (GPUs of any vendor, MIG slices, NICs): what makes it
    hard to place, so placement tries such pods first."""
    return sum(value for key, value in requests.items() if "/" in key)


def _container_amounts(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    # Kubernetes defaults a missing request to the limit (always so for extended resources).
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    amounts: Resources = {}
    for key, value in merged.items():
        try:
            amounts[key] = parse_quantity(value, key)
        except ValueError:
            continue
    return amounts


def pod_requests(pod_spec: Mapping[str, Any]) -> Resources:
    """What the scheduler and the quota charge for a pod, plus one `pods`: the sum of its
    containers' and native sidecars' (init containers with restartPolicy Always, which keep
    running) requests, or, if larger, what any plain init container needs while it runs
    beside the sidecars started before it (Kubernetes' effective pod request)."""
    sidecars: Resources = {}
    peak: Resources = {}
    for init in pod_spec.get("initContainers") or []:
        amounts = _container_amounts(init)
        if init.get("restartPolicy") == "Always":
            sidecars = add(sidecars, amounts)
            continue
        for key, value in add(sidecars, amounts).items():
            peak[key] = max(peak.get(key, 0), value)
    total = add(sidecars, *(_container_amounts(c) for c in pod_spec.get("containers") or []))
    for key, value in peak.items():
        total[key] = max(total.get(key, 0), value)
    total[PODS] = 1
    return total


HOST_PORT = "host-port "
"""Prefix of a node's free-room key that marks a host port taken ("host-port TCP:29500",
no "/" so that it never counts as a device): placement keeps it beside the resources."""


def pod_host_ports(pod_spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The node ports the pod binds, as HOST_PORT keys: every container port under
    hostNetwork (the host port is the container port), else each explicit hostPort. Two such
    pods never share a node (the scheduler's NodePorts filter); the host IP is ignored, so
    the check is never looser than the scheduler's."""
    host_network = bool(pod_spec.get("hostNetwork"))
    keys: list[str] = []
    for c in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        for port in c.get("ports") or []:
            number = port.get("hostPort") or (port.get("containerPort") if host_network else 0)
            if isinstance(number, int) and number > 0:
                keys.append(f"{HOST_PORT}{port.get('protocol') or 'TCP'}:{number}")
    return tuple(sorted(set(keys)))


# `requests.<x>` quota keys that are not pod resources: PVC storage (also per storage class,
# `<class>.storageclass.storage.k8s.io/requests.storage` never starts with requests.).
_NOT_POD_RESOURCES = frozenset({"storage"})


def is_extended(resource: str) -> bool:
    """An extended resource (<domain>/<name>) or hugepages: a node offers none of it unless
    its allocatable lists it, unlike cpu, memory and pods."""
    return "/" in resource or resource.startswith("hugepages-")


def quota_resource(key: str) -> str | None:
    """The pod resource a ResourceQuota key limits, or None when the admission does not
    model it (limits.*, services, count/* other than pods, storage)."""
    if key in QUOTA_KEYS:
        return QUOTA_KEYS[key]
    if key.startswith("requests."):
        resource = key.removeprefix("requests.")
        return resource if resource not in _NOT_POD_RESOURCES else None
    return None


def quota_amounts(hard: Mapping[str, object]) -> Resources:
    """A ResourceQuota's hard (or used) map in pod-resource terms; keys the admission does
    not model (limits.*, services, ...) are left out. `cpu` and `requests.cpu` both given:
    the smaller limit wins."""
    amounts: Resources = {}
    for key, value in hard.items():
        resource = quota_resource(key)
        if resource is None:
            continue
        try:
            parsed = parse_quantity(value, resource)
        except ValueError:
            continue
        amounts[resource] = min(parsed, amounts.get(resource, parsed))
    return amounts


def total_requests(pods: Iterable[Mapping[str, int]]) -> Resources:
    """Sum of many pods' requests."""
    return add(*pods)
