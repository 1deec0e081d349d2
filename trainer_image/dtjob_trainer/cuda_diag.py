"""Why torch sees no GPU, in words a user can act on.

The image's torch is built for one CUDA version (the TORCH_VARIANT build argument of
trainer_image/Dockerfile), and that build needs a minimum NVIDIA driver on the node. A
node with an older driver looks, to torch, exactly like a node with no GPU; the message
names the driver found, the CUDA version torch was built for and the way out.
`no_cuda_message` is the pure part; `diagnose_no_cuda` gathers the facts.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"

# Image variant -> (CUDA version of its torch, least Linux driver that runs it). CUDA 12
# builds run on any R525+ driver (minor-version compatibility); CUDA 13 needs R580+.
VARIANTS: dict[str, tuple[str, str]] = {
    "cu126": ("12.6", "525.60.13"),
    "cu128": ("12.8", "525.60.13"),
    "cu130": ("13.0", "580.65.06"),
}
MIN_DRIVER_BY_CUDA_MAJOR = {12: "525.60.13", 13: "580.65.06"}


def parse_version(text: str) -> tuple[int, ...]:
    """ "580.65.06" -> (580, 65, 6)."""
    return tuple(int(part) for part in text.split("."))


def driver_version_from(proc_text: str) -> str | None:
    """The driver version in the text of /proc/driver/nvidia/version (its first dotted
    number of three or more leading digits, e.g. 535.104.05), None when there is none."""
    match = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", proc_text)
    return match.group(1) if match else None


def min_driver(torch_cuda: str) -> str | None:
    """The least driver for torch built with CUDA `torch_cuda` ("13.0"), if known."""
    try:
        major = int(torch_cuda.split(".")[0])
    except ValueError:
        return None
    return MIN_DRIVER_BY_CUDA_MAJOR.get(major)


def best_variant(driver: str) -> str | None:
    """The newest image variant a node with `driver` can run, None when it runs none."""
    fits = [
        v for v, (_, least) in VARIANTS.items() if parse_version(driver) >= parse_version(least)
    ]
    return fits[-1] if fits else None


def _first_sentence(text: str) -> str:
    return text.strip().split(". ")[0].rstrip(".")


def no_cuda_message(
    driver: str | None,
    torch_cuda: str | None,
    init_error: str | None = None,
    visible_devices: str | None = None,
) -> str:
    """What to do when torch sees no CUDA device. `driver` is the node's NVIDIA driver
    version (None when no driver is visible), `torch_cuda` is torch.version.cuda (None for a
    CPU build), `init_error` the text of torch's CUDA initialisation error, and
    `visible_devices` CUDA_VISIBLE_DEVICES."""
    seen = f" (torch says: {_first_sentence(init_error)})" if init_error else ""
    if visible_devices is not None and visible_devices.strip() in ("", "-1", "none", "void"):
        return (
            f"CUDA_VISIBLE_DEVICES={visible_devices!r} hides every GPU{seen}; unset it or "
            "name the GPUs to use"
        )
    if driver is None:
        return (
            f"no NVIDIA driver is visible in this container ({DRIVER_VERSION_FILE} is "
            f"missing){seen}; request GPUs in roles.<role>.gpus so the device plugin mounts "
            "them, and run on a GPU node"
        )
    if torch_cuda is None:
        return (
            f"the node has NVIDIA driver {driver} but this image's torch is a CPU build; "
            f"rebuild the trainer image with --build-arg TORCH_VARIANT="
            f"{best_variant(driver) or 'cu126'}"
        )
    least = min_driver(torch_cuda)
    if least is not None and parse_version(driver) < parse_version(least):
        variant = best_variant(driver)
        instead = (
            f"use a trainer image built with --build-arg TORCH_VARIANT={variant} "
            f"(CUDA {VARIANTS[variant][0]}, driver >= {VARIANTS[variant][1]}) or upgrade "
            f"the node's driver to {least} or newer"
            if variant
            else f"upgrade the node's driver to {least} or newer"
        )
        return (
            f"the node's NVIDIA driver {driver} is too old for this image's torch, built for "
            f"CUDA {torch_cuda} (needs driver >= {least}){seen}; {instead}"
        )
    return (
        f"NVIDIA driver {driver} is present and torch is built for CUDA {torch_cuda}, yet no "
        f"device is visible{seen}; check that the pod requests GPUs (roles.<role>.gpus) and "
        "that the node's device plugin is healthy"
    )


def diagnose_no_cuda() -> str:
    """`no_cuda_message` for this process: reads the driver version file, torch's CUDA
    build and its initialisation error."""
    import torch

    try:
        driver = driver_version_from(Path(DRIVER_VERSION_FILE).read_text())
    except OSError:
        driver = None
    init_error = None
    try:
        torch.cuda.init()  # type: ignore[no-untyped-call]
    except Exception as exc:  # any failure text is what the message shows
        init_error = str(exc)
    return no_cuda_message(
        driver, torch.version.cuda, init_error, os.environ.get("CUDA_VISIBLE_DEVICES")
    )
