"""Just enough Kubernetes quantity arithmetic to size /dev/shm."""

from __future__ import annotations

import re

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$")


def parse_bytes(quantity: str) -> int:
    """Bytes of a memory quantity such as "1Gi", "512Mi", "2G" or "1048576"."""
    match = _QUANTITY.match(quantity.strip())
    if match is None:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    number, suffix = match.groups()
    factor = _BINARY.get(suffix) or _DECIMAL.get(suffix)
    if factor is None:
        raise ValueError(f"unknown quantity suffix {suffix!r} in {quantity!r}")
    return int(float(number) * factor)


def format_bytes(value: int) -> str:
    """The shortest exact binary quantity: 2147483648 -> "2Gi", 1536Mi stays "1536Mi"."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY[suffix]
        if value >= factor and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
