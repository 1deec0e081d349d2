"""The message of a node where torch sees no GPU: driver found, torch's CUDA, what to do."""

from __future__ import annotations

from dtjob_trainer.cuda_diag import (
    best_variant,
    driver_version_from,
    min_driver,
    no_cuda_message,
)

PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
)
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 07:09:29 UTC 2025\n"
)


def test_driver_version_is_read_from_both_module_flavours() -> None:
    assert driver_version_from(PROPRIETARY) == "535.104.05"
    assert driver_version_from(OPEN) == "580.65.06"
    assert driver_version_from("garbage") is None


def test_minimum_drivers_and_variants() -> None:
    assert min_driver("13.0") == "580.65.06"
    assert min_driver("12.8") == "525.60.13"
    assert min_driver("11.8") is None
    assert best_variant("535.104.05") == "cu128"
    assert best_variant("580.65.06") == "cu130"
    assert best_variant("470.82.01") is None


def test_an_old_driver_names_itself_torch_cuda_and_the_way_out() -> None:
    msg = no_cuda_message("535.104.05", "13.0", "The NVIDIA driver on your system is too old")
    assert "535.104.05" in msg and "CUDA 13.0" in msg and "580.65.06" in msg
    assert "TORCH_VARIANT=cu128" in msg and "upgrade" in msg
    assert "too old" in msg


def test_a_driver_too_old_for_every_variant_says_upgrade() -> None:
    msg = no_cuda_message("470.82.01", "13.0")
    assert "470.82.01" in msg and "TORCH_VARIANT" not in msg and "580.65.06 or newer" in msg


def test_no_driver_points_at_the_gpu_request() -> None:
    msg = no_cuda_message(None, "13.0", "Found no NVIDIA driver on your system. Please check")
    assert "no NVIDIA driver" in msg and "roles.<role>.gpus" in msg
    assert "Found no NVIDIA driver on your system)" in msg


def test_a_cpu_build_of_torch_on_a_gpu_node() -> None:
    msg = no_cuda_message("580.65.06", None)
    assert "CPU build" in msg and "TORCH_VARIANT=cu130" in msg


def test_a_good_driver_without_devices_and_hidden_devices() -> None:
    msg = no_cuda_message("580.65.06", "13.0")
    assert "580.65.06" in msg and "device plugin" in msg
    hidden = no_cuda_message("580.65.06", "13.0", visible_devices="")
    assert "CUDA_VISIBLE_DEVICES" in hidden
