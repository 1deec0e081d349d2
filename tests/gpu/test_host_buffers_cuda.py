"""The background checkpoint's host buffers on CUDA (`make test-gpu`; skipped without
CUDA): the first save stages into ordinary memory without waiting for page-locking, and
every later save copies into page-locked buffers made meanwhile on another thread."""

from __future__ import annotations

import pytest
import torch

from dtjob_trainer.async_checkpoint import HostStager

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device visible to torch"
)


def test_later_saves_copy_into_page_locked_buffers() -> None:
    device = torch.device("cuda", 0)
    state = {
        "model": {"w": torch.randn(1024, 1024, device=device)},
        "optim": {"step": torch.tensor(3.0), "m": [torch.randn(4096, device=device)]},
    }
    stager = HostStager()
    first = stager.stage(state)
    assert not first["model"]["w"].is_pinned(), "the first save waited for page-locking"
    assert torch.equal(first["model"]["w"], state["model"]["w"].cpu())
    state["model"]["w"].mul_(2)
    second = stager.stage(state)
    buffers = stager.buffers()
    assert buffers and all(b.is_pinned() for b in buffers)
    assert torch.equal(second["model"]["w"], state["model"]["w"].cpu())
    assert torch.equal(second["optim"]["m"][0], state["optim"]["m"][0].cpu())
