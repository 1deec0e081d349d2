"""A machine's fault in a container's last words (its termination message: the log's last
lines), as opposed to the program's. Pure.

The words are those the driver, CUDA and NCCL print for faults of the GPU or the fabric:
NVIDIA's Xid events, uncorrectable ECC errors, a GPU fallen off the bus or lost to the
driver, NVLink errors, InfiniBand completion errors as NCCL's NET/IB logs them, a failed
ibverbs call. A CUDA out-of-memory, a device-side assert or an illegal memory access are
the program's, and are not here. Such a failure is retryable whatever its exit code
(failure_policy.is_retryable: the program was fine, the node was not) and points the
job's next gangs away from its node (node_blame.py)."""

from __future__ import annotations

import re

HARDWARE_FAULT = re.compile(
    r"\bXid\b|uncorrectable ECC|ECC error|fallen off the bus|GPU is lost|"
    r"cudaErrorECCUncorrectable|cudaErrorDevicesUnavailable|NVLink|NET/IB\b.*error|"
    r"\bibv_\w+ failed",
    re.IGNORECASE,
)


def hardware_fault(detail: str | None) -> str | None:
    """The line of `detail` that names a hardware fault (stripped), or None."""
    for line in (detail or "").splitlines():
        if HARDWARE_FAULT.search(line):
            return line.strip()
    return None
