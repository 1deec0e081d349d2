"""Resource names a role may request besides cpu and memory: GPUs of any vendor or MIG
profile (RoleSpec.gpuResource) and other extended resources and hugepages
(RoleSpec.extendedResources). Checked by pydantic in the operator and, the same way, by CEL
in the API server (a map's keys have no schema of their own in a CRD)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# A device plugin's `<domain>/<name>`, as Kubernetes' IsExtendedResourceName.
EXTENDED_RESOURCE_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
HUGEPAGES_PATTERN = r"^hugepages-[0-9]+(Ki|Mi|Gi)$"
RESOURCE_NAME_MAX = 253
MAX_EXTENDED_RESOURCES = 16
# kubernetes.io and its subdomains are Kubernetes' own (not extended resources), and
# requests.* is how a ResourceQuota names a resource, not a resource.
RESERVED_RESOURCE_PATTERN = r"^(requests[.]|([^/]*[.])?kubernetes[.]io/)"
EXTENDED_NAME_RULE = (
    f"self.all(k, (k.matches('{EXTENDED_RESOURCE_PATTERN}') && "
    f"!k.matches('{RESERVED_RESOURCE_PATTERN}')) || k.matches('{HUGEPAGES_PATTERN}'))"
)
EXTENDED_NAME_MESSAGE = (
    "keys must be extended resource names (<domain>/<name> outside kubernetes.io, e.g. "
    "rdma/hca_shared_devices_a or vpc.amazonaws.com/efa) or hugepages-<size>; cpu, memory "
    "and the GPUs (gpus, gpuResource) have fields of their own"
)
GPU_IN_EXTENDED_MESSAGE = "must not list gpuResource: set gpus instead"
# Kubernetes refuses a pod that asks for a fraction of an extended resource (devices come
# whole); hugepages are bytes, any multiple of the page size. The CEL quantity library
# parses the value (an int-or-string: string() of either) as the API server would.
WHOLE_UNITS_RULE = (
    f"self.all(k, k.matches('{HUGEPAGES_PATTERN}') || quantity(string(self[k])).isInteger())"
)
WHOLE_UNITS_MESSAGE = "extended resources come in whole units: 1 or 4, not 0.5 or 500m"
_SUFFIX_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                     "E": 18}  # fmt: skip
_QUANTITY = re.compile(r"^\+?([0-9]*[.]?[0-9]*)(([KMGTPE]i)|[numkMGTPE]|[eE][-+]?[0-9]+)?$")


def is_extended_resource(name: str) -> bool:
    """A device plugin's resource name, as Kubernetes' IsExtendedResourceName."""
    return (
        re.match(EXTENDED_RESOURCE_PATTERN, name) is not None
        and re.match(RESERVED_RESOURCE_PATTERN, name) is None
    )


def is_hugepages(name: str) -> bool:
    """hugepages-<size>: bytes, not devices."""
    return re.match(HUGEPAGES_PATTERN, name) is not None


def is_extra_resource_name(name: str) -> bool:
    """A name RoleSpec.extendedResources may hold: an extended resource or hugepages."""
    return is_extended_resource(name) or is_hugepages(name)


# RoleSpec's own CEL rules: about the pair of fields, and the reserved domain.
ROLE_RESOURCE_RULES: list[Any] = [
    {
        "rule": "!has(self.extendedResources) || !(self.gpuResource in self.extendedResources)",
        "message": GPU_IN_EXTENDED_MESSAGE,
        "fieldPath": ".extendedResources",
    },
    {
        "rule": f"!self.gpuResource.matches('{RESERVED_RESOURCE_PATTERN}')",
        "message": "must be an extended resource name outside kubernetes.io, "
        "e.g. nvidia.com/gpu or amd.com/gpu",
        "fieldPath": ".gpuResource",
    },
]


def is_whole_units(quantity: str) -> bool:
    """Whether a quantity (valid by QUANTITY_PATTERN) is a whole number, as Kubernetes
    requires of an extended resource: "4", "1k", "2000m" yes; "0.5", "1500m" no."""
    found = _QUANTITY.match(quantity)
    if not found:
        return False
    number, suffix = Decimal(found.group(1)), found.group(2) or ""
    if suffix.endswith("i"):
        return bool((number * 1024 ** ("KMGTPE".index(suffix[0]) + 1)) % 1 == 0)
    exponent = int(suffix[1:]) if suffix[:1] in ("e", "E") else _SUFFIX_EXPONENTS[suffix]
    return bool(number.scaleb(exponent) % 1 == 0)
