"""What the rank fork server (ranks.py) imports once, before any rank forks from it: torch,
its distributed packages and every strategy module. `import torch` alone is over 2 s of CPU
and the distributed checkpoint and DTensor packages another second; each forked rank then
starts with them imported instead of importing them again."""

from __future__ import annotations

import importlib

import torch
import torch.distributed
import torch.distributed.checkpoint
import torch.distributed.fsdp
import torch.distributed.tensor
import torch.nn  # noqa: F401

from dtjob_trainer import context  # noqa: F401
from dtjob_trainer.strategies import MODULES

for _module in MODULES.values():
    importlib.import_module(f"dtjob_trainer.strategies.{_module}")
