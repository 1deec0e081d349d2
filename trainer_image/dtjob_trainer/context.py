"""What a strategy gets (`RunContext`) and returns (`RunResult`).

A strategy is a module in `dtjob_trainer.strategies` with `def run(ctx: RunContext) ->
RunResult`. The process group is already initialised when it is called (`ctx.rank`,
`ctx.world_size`, `ctx.device`); it builds its model with `ctx.build_model()`, its data
with `ctx.dataset()`, and usually hands a `loop.Trainable` to `loop.run_loop`, which does
resume, logging, progress, checkpoints and SIGTERM. `ctx.stop` is set by SIGTERM.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch
from torch import nn

from dtjob_api.spec import Precision
from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.config import TrainerConfig
from dtjob_trainer.data import Dataset, load_dataset
from dtjob_trainer.env import DistEnv
from dtjob_trainer.heartbeat import Heartbeat
from dtjob_trainer.history import TrainingHistory
from dtjob_trainer.models import build_model
from dtjob_trainer.progress import ProgressReporter
from dtjob_trainer.speed import apply_block_options


@dataclass(frozen=True)
class RunOptions:
    """Command-line options of `run` (not part of the job config)."""

    result_file: str | None = None
    """Rank 0 writes the RunResult here (torch.save) when training ends."""
    verify_replicas: bool = False
    """After every step, check that replicated parameters are identical on all ranks."""


@dataclass
class RunContext:
    """Everything a strategy needs; one per process."""

    env: DistEnv
    cfg: TrainerConfig
    backend: str
    device: torch.device
    checkpoints: Checkpointer
    reporter: ProgressReporter
    options: RunOptions = field(default_factory=RunOptions)
    history: TrainingHistory = field(default_factory=TrainingHistory.disabled)
    """Rank 0's loss history (metrics.jsonl, the history ConfigMap, TensorBoard)."""
    stop: threading.Event = field(default_factory=threading.Event)
    strategy_name: str = ""
    """The strategy actually run (Auto fills in its choice)."""
    heartbeat: Heartbeat = field(default_factory=lambda: Heartbeat(rank=0))
    """This rank's step clock (`beat()` after every step); the runner's publishes it, the
    default only records."""

    @property
    def rank(self) -> int:
        """Global rank of this process."""
        return self.env.rank

    @property
    def world_size(self) -> int:
        """Processes in the job."""
        return self.env.world_size

    @property
    def wire(self) -> torch.device:
        """Where tensors of collectives live: host memory under gloo (a GPU rank of a
        parameter-server mode copies), the rank's device under NCCL."""
        return torch.device("cpu") if self.backend == "gloo" else self.device

    @property
    def dtype(self) -> torch.dtype:
        """Parameter dtype: float64 for fp64, float32 otherwise (bf16 autocasts compute)."""
        return torch.float64 if self.cfg.trainer.precision == Precision.FP64 else torch.float32

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """bf16 autocast for the forward pass when precision is bf16, else nothing."""
        if self.cfg.trainer.precision != Precision.BF16:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def build_model(self) -> nn.Sequential:
        """The configured model, seeded, in `dtype`, on the CPU (strategies move it), its
        blocks checkpointed / compiled as trainer.activationCheckpointing / compile say."""
        t = self.cfg.trainer
        return apply_block_options(
            build_model(self.cfg, self.dtype), t.activationCheckpointing, t.compile
        )

    @cached_property
    def data(self) -> Dataset:
        """The configured data set (CPU tensors, features in `dtype`)."""
        return load_dataset(self.cfg, self.dtype)

    def seed_step(self, step: int) -> None:
        """Seed torch's RNGs as a pure function of (seed, step, rank) before a step, so a
        resumed run draws the same random numbers as an uninterrupted one without
        carrying RNG state in checkpoints."""
        seed = int(
            np.random.SeedSequence([self.cfg.trainer.seed, step, self.rank]).generate_state(1)[0]
        )
        # Not torch.manual_seed: without an initialised CUDA it queues a lazy CUDA seeding
        # with a captured stack trace on every call (~0.1 ms a step).
        torch.default_generator.manual_seed(seed)
        if self.device.type == "cuda":
            torch.cuda.manual_seed(seed)


@dataclass
class RunResult:
    """The outcome of a strategy; the tensors and losses are filled on rank 0 only."""

    strategy: str
    steps: int
    """Completed optimizer steps (including those before a resume)."""
    start_step: int = 0
    """Step this process started from (non-zero after a resume)."""
    losses: list[float] = field(default_factory=list)
    """Global loss of every step run by this process (start_step .. steps-1)."""
    final_loss: float | None = None
    accuracy: float | None = None
    params: dict[str, torch.Tensor] | None = None
    """Full parameters by name (the unwrapped model's names), CPU."""
    replicas_checked: int = 0
    """Steps after which replicas were verified identical (--verify-replicas)."""
    train_seconds: float = 0.0
    """Wall time of the steps run by this process (excluding start-up, checkpoint writes
    and evaluation), for throughput figures."""
    train_cpu_seconds: float = 0.0
    """CPU time this process spent over the same span (robust to other load on the host)."""
    peak_device_bytes: int | None = None
    """Peak GPU memory allocated by this process (None on the CPU)."""
    message: str = ""
