"""Resource names a role may request besides cpu and memory: GPUs of any vendor or MIG
profile (RoleSpec.gpuResource) and other extended resources and hugepages
(RoleSpec.extendedResources). Checked by pydantic in the operator and, the same way, by CEL
in the API server (a map's keys have no schema of their own in a CRD)."""

from __future__ import annotations

import re
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
# whole). Whole units are written as an integer with at most a multiplying suffix (4, 1k,
# 2Ki; hugepages too: 512Mi, not 0.5Gi). "2000m" is whole as well, but the check is the
# value's schema pattern: any CEL rule that reads an int-or-string as a string is over the
# API server's cost budget (its size is unknown to the estimator), a pattern costs nothing,
# and both languages hold the value to this one pattern (an int from YAML always passes).
WHOLE_UNITS_PATTERN = r"^[+]?[0-9]+([kMGTPE]|[KMGTPE]i)?$"
WHOLE_UNITS_MESSAGE = (
    "must be a quantity in whole units, such as 1, 4, 2k or 512Mi (not 0.5, 500m or 0.5Gi): "
    "Kubernetes refuses a fraction of an extended resource"
)


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
    """Whether a quantity is a whole number written as Kubernetes users write devices: an
    integer with at most a multiplying suffix ("4", "1k", "2Ki"; not "0.5", "500m")."""
    return re.match(WHOLE_UNITS_PATTERN, quantity) is not None


# An object name (a claim, a ConfigMap): Kubernetes' DNS-1123 subdomain.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
