"""Freed heap handed back at idle moments (dtjob_operator/heap.py)."""

from __future__ import annotations

import sys

import pytest

from dtjob_operator.heap import HeapTrimmer


def test_trims_at_most_once_an_interval() -> None:
    now = [0.0]
    trimmer = HeapTrimmer(30.0, clock=lambda: now[0])
    if not trimmer.available:
        pytest.skip("no malloc_trim in this C library")  # not glibc: nothing to check
    trimmer.idle()
    assert trimmer.trims == 0  # not right after the start
    now[0] = 31.0
    trimmer.idle()
    trimmer.idle()
    assert trimmer.trims == 1
    now[0] = 62.0
    trimmer.idle()
    assert trimmer.trims == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc on Linux")
def test_the_glibc_call_is_found_and_returns_freed_pages() -> None:
    """On the operator image's glibc: a freed heap goes back to the system."""
    now = [0.0]
    trimmer = HeapTrimmer(0.0, clock=lambda: now[0])
    assert trimmer.available
    before = _rss_kib()
    # Many mid-sized blocks from glibc's heap (not mmap'd), every other one kept alive so
    # the heap's top cannot shrink on its own when the rest are freed.
    blocks = [bytearray(64 * 1024 - 64) for _ in range(3000)]
    keep = blocks[1::2]
    del blocks
    grown = _rss_kib()
    trimmer.idle()
    after = _rss_kib()
    assert grown - before > 100_000  # the blocks did grow the heap
    assert grown - after > 50_000  # the freed half went back
    assert keep


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
