"""What the tests' fork server (forkserver.py) imports once, before any rank or launcher
forks from it: torch, its distributed packages, every strategy module and the launcher.
`import torch` alone is over 2 s of CPU and the distributed checkpoint and DTensor packages
another second; each forked process then starts with them imported."""

from __future__ import annotations

import importlib

import torch
import torch.distributed
import torch.distributed.checkpoint
import torch.distributed.fsdp
import torch.distributed.tensor
import torch.nn  # noqa: F401

from dtjob_trainer import __main__ as command  # noqa: F401
from dtjob_trainer import context, launch  # noqa: F401
from dtjob_trainer.strategies import MODULES

for _module in MODULES.values():
    importlib.import_module(f"dtjob_trainer.strategies.{_module}")
