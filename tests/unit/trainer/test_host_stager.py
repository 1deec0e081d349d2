"""The background checkpoint's host buffers (`async_checkpoint.HostStager`): made once,
reused, and moved to page-locked twins made on a thread of their own, so that the first
save does not wait for the page-locking (7.9 s on the H200). Page-locking needs CUDA, so
the twins here are ordinary tensors from an injected allocator; the FSDP runs of
test_async_checkpoint.py stage DTensors through the same path."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import torch

from dtjob_trainer.async_checkpoint import HostStager


def _state(scale: float) -> dict[str, Any]:
    """A nested state like a model's and optimizer's: tensors, a scalar step, a list."""
    return {
        "model": {"w": torch.full((3, 4), scale), "b": torch.full((4,), -scale)},
        "optim": {"step": torch.tensor(7.0), "groups": [{"lr": 0.1, "m": torch.ones(2) * scale}]},
    }


class _Twins:
    """An allocator that records its twins and, while `hold` is clear, does not return."""

    def __init__(self, fail: bool = False) -> None:
        self.hold = threading.Event()
        self.made: list[torch.Tensor] = []
        self.fail = fail

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        assert self.hold.wait(30), "the test never released the allocator"
        if self.fail:
            raise RuntimeError("cudaErrorMemoryAllocation (injected)")
        twin = torch.empty(t.shape, dtype=t.dtype)
        self.made.append(twin)
        return twin


def _tensors(staged: dict[str, Any]) -> list[torch.Tensor]:
    model, optim = staged["model"], staged["optim"]
    return [model["w"], model["b"], optim["groups"][0]["m"]]


def _assert_staged(staged: dict[str, Any], scale: float) -> None:
    assert torch.equal(staged["model"]["w"], torch.full((3, 4), scale))
    assert torch.equal(staged["model"]["b"], torch.full((4,), -scale))
    assert torch.equal(staged["optim"]["groups"][0]["m"], torch.ones(2) * scale)
    assert staged["optim"]["step"].item() == 7.0


def test_the_first_save_stages_before_its_page_locked_twins_exist() -> None:
    twins = _Twins()
    stager = HostStager(allocate=twins)
    first = stager.stage(_state(1.0))  # would wait 30 s and fail if it waited for the twins
    _assert_staged(first, 1.0)
    assert twins.made == []
    twins.hold.set()
    second = stager.stage(_state(2.0))
    _assert_staged(second, 2.0)
    # Every non-scalar buffer is now its twin; the zero-dimension step is not worth one.
    assert [id(t) for t in _tensors(second)] == [id(t) for t in twins.made]
    third = stager.stage(_state(3.0))
    _assert_staged(third, 3.0)
    assert [id(t) for t in _tensors(third)] == [id(t) for t in twins.made], "reused, not remade"
    assert [id(t) for t in stager.buffers()] == [id(t) for t in twins.made]


def test_a_layout_change_drops_twins_made_for_the_old_buffers() -> None:
    twins = _Twins()
    twins.hold.set()
    stager = HostStager(allocate=twins)
    stager.stage(_state(1.0))
    bigger = _state(2.0)
    bigger["model"]["w"] = torch.full((5, 4), 2.0)
    staged = stager.stage(bigger)
    assert torch.equal(staged["model"]["w"], torch.full((5, 4), 2.0))
    assert not any(staged["model"]["w"] is t for t in twins.made[:3])
    again = stager.stage(bigger)  # the new buffers' twins, made after the change
    assert again["model"]["w"] is twins.made[3]
    assert torch.equal(again["model"]["w"], torch.full((5, 4), 2.0))


def test_failed_page_locking_keeps_the_ordinary_buffers_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    twins = _Twins(fail=True)
    twins.hold.set()
    stager = HostStager(allocate=twins)
    first = _tensors(stager.stage(_state(1.0)))
    with caplog.at_level(logging.WARNING, logger="dtjob_trainer.async_checkpoint"):
        second = stager.stage(_state(2.0))
    _assert_staged(second, 2.0)
    assert [id(t) for t in _tensors(second)] == [id(t) for t in first]
    assert "page-locking them failed: RuntimeError: cudaErrorMemoryAllocation" in caplog.text


def test_a_cpu_run_makes_no_twins() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible: the default is page-locked twins")
    assert HostStager().allocate is None
