"""bench/gpu_claims.py's `async` section: the stall of a background sharded checkpoint
(async_checkpoint.AsyncSaver) on the training loop.

One rank (nccl, world size 1) trains an FSDP2 GPT of 507M parameters (32 layers of
dModel 1024, seqLen 1024, vocab 50304, batch 4, fused AdamW, fp32 with TF32 matmuls)
built on the GPU; the median step time of 20 steps without a save; a background save
(the first stages into ordinary host memory while the page-locked buffers every later
one reuses are made on another thread), stepping until it is committed: what `start`
blocked the loop, the step times meanwhile; the blocking save (sharded.save_sharded); a
second background save. Checkpoints go to /dev/shm when it has room (the figures are
then the trainer's stall, not the disk's speed).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from claims_common import (
    CHILD_MARGIN_SECONDS,
    GIB,
    Deadline,
    Row,
    emit,
    fmt,
    on_gpu,
    section_header,
)
from claims_launch import workspace

if TYPE_CHECKING:
    from dtjob_trainer.async_checkpoint import AsyncSaver


@dataclass(frozen=True)
class AsyncSizes:
    """The background checkpoint's GPT and step counts."""

    layers: int
    d_model: int
    heads: int
    seq_len: int
    vocab: int
    batch: int
    warmup: int
    steps: int
    max_steps_in_flight: int


GPU_ASYNC = AsyncSizes(32, 1024, 16, 1024, 50304, 4, 3, 20, 400)
CPU_ASYNC = AsyncSizes(2, 64, 4, 32, 256, 2, 1, 4, 50)


def fsdp_gpt(s: AsyncSizes, device: torch.device) -> torch.nn.Module:
    """The trainer's GPT built on the meta device, sharded with FSDP2 over the one rank,
    then allocated and initialised on `device` itself (a model of this size built on the
    CPU and copied would take longer than the measurement)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from dtjob_trainer.config import load_config
    from dtjob_trainer.models import build_model

    spec = {
        "strategy": {"type": "FSDP"},
        "roles": {"worker": {"replicas": 1}},
        "trainer": {
            "model": {
                "type": "GPT",
                "layers": s.layers,
                "dModel": s.d_model,
                "heads": s.heads,
                "seqLen": s.seq_len,
                "vocabSize": s.vocab,
            },
            "dataset": {"type": "SyntheticTokens"},
            "optimizer": {"type": "AdamW", "lr": 1e-4},
        },
    }
    mesh = init_device_mesh(device.type, (1,))
    model = build_model(load_config(spec), torch.float32, meta=True)
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            local = param.to_local() if isinstance(param, DTensor) else param
            if local.ndim > 1:
                local.normal_(0.0, 0.02)
            else:  # LayerNorm weights 1, biases 0 (the values do not matter, finite do)
                local.fill_(1.0 if name.endswith("weight") else 0.0)
    return model


@dataclass
class Stepper:
    """Timed training steps of the FSDP model on fixed random tokens."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    x: torch.Tensor
    y: torch.Tensor
    device: torch.device
    step_no: int = 0

    def step(self) -> float:
        """One synchronised step; its seconds."""
        from dtjob_trainer.models import loss_fn

        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(loss_fn(self.model(self.x), self.y))
        self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.step_no += 1
        return time.perf_counter() - start

    def steps(self, n: int) -> list[float]:
        return [self.step() for _ in range(n)]


def seconds_summary(times: list[float]) -> dict[str, Any]:
    if not times:
        return {"steps": 0}
    return {
        "steps": len(times),
        "median": round(statistics.median(times), 4),
        "max": round(max(times), 4),
    }


def background_save(
    saver: AsyncSaver, stepper: Stepper, s: AsyncSizes, deadline: Deadline
) -> dict[str, Any]:
    """Start a background save, step until it is committed (at least once, at most
    `max_steps_in_flight` steps or to the deadline), then wait for it."""
    start = time.perf_counter()
    saver.start(stepper.step_no)
    staged = time.perf_counter() - start
    times: list[float] = []
    committed_after = None
    while len(times) < s.max_steps_in_flight and deadline.left() > 0:
        times.append(stepper.step())
        if saver.committed() is not None:
            committed_after = time.perf_counter() - start
            break
    outcome = saver.wait()
    waited = time.perf_counter() - start
    return {
        "start_blocked_loop_seconds": round(staged, 4),
        "committed_after_seconds": round(committed_after or waited, 3),
        "committed_while_stepping": committed_after is not None,
        "outcome": outcome.kind if outcome is not None else None,
        "step_seconds_during": seconds_summary(times),
    }


def checkpoint_root(tmp: str | None, need: int) -> tuple[str | None, str]:
    """Where the checkpoints go, and what that is: /dev/shm when it has room for two (the
    previous one stays until the next is committed), so that the window's seconds go to
    the trainer's stall rather than to the disk (a slower disk keeps a save in flight
    longer, it does not change what a step pays meanwhile); else `tmp`, a disk."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 2 * need + GIB:
        return str(shm), "/dev/shm (memory)"
    return tmp, f"{tmp or tempfile.gettempdir()} (disk)"


def saves_in_flight(
    record: dict[str, Any], stepper: Stepper, s: AsyncSizes, deadline: Deadline, tmp: str | None
) -> None:
    """A background save (the first stages into ordinary host memory while the page-locked
    buffers every later one reuses are made on another thread), the blocking save, then a
    background save again, each while time is left for it; whether the saver's buffers
    ended up page-locked."""
    from dtjob_trainer.async_checkpoint import AsyncSaver
    from dtjob_trainer.checkpoint import Checkpointer
    from dtjob_trainer.sharded import ShardedState, save_sharded

    root, where = checkpoint_root(tmp, int(record["checkpoint_gib"] * GIB))
    record["checkpoint_storage"] = where
    with workspace("gpu-claims-ckpt-", root) as work:
        ck = Checkpointer(work, keep=1)
        state = ShardedState(stepper.model, stepper.optimizer)
        saver = AsyncSaver(ck, state, "FSDP", 0, 1)
        saves: list[dict[str, Any]] = []
        record["background_saves"] = saves
        saves.append({"first": True, **background_save(saver, stepper, s, deadline)})
        emit(record)
        # What the next save will take, about: the first's write.
        write = saves[0]["committed_after_seconds"] - saves[0]["start_blocked_loop_seconds"]
        if deadline.left() > 1.5 * write + 2:
            start = time.perf_counter()
            save_sharded(ck, state, stepper.step_no, "FSDP", 0, 1)
            record["blocking_save_seconds"] = round(time.perf_counter() - start, 3)
            stepper.step()  # the next save is of another step
            emit(record)
        if deadline.left() > 1.5 * write + 2:
            saves.append({"first": False, **background_save(saver, stepper, s, deadline)})
        record["host_buffers_page_locked"] = page_locked_share(saver)


def page_locked_share(saver: AsyncSaver) -> float:
    """The share of the saver's host buffers that are page-locked (1.0 on a GPU once a
    second save has staged; 0.0 on a CPU run)."""
    buffers = saver.stager.buffers()
    if not buffers or not torch.cuda.is_available():
        return 0.0
    return round(sum(b.is_pinned() for b in buffers) / len(buffers), 3)


def section_async(rehearse: bool, seconds: float, cap_gib: float, tmp: str | None) -> None:
    import torch.distributed as dist

    from dtjob_api.spec import OptimizerSpec
    from dtjob_trainer.launch import free_port
    from dtjob_trainer.optim import build_optimizer
    from dtjob_trainer.speed import enable_tf32

    gpu = on_gpu(rehearse)
    s = GPU_ASYNC if gpu else CPU_ASYNC
    deadline = Deadline(seconds - CHILD_MARGIN_SECONDS)
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    enable_tf32(device)
    address = f"tcp://127.0.0.1:{free_port()}"
    dist.init_process_group("nccl" if gpu else "gloo", init_method=address, rank=0, world_size=1)
    model = fsdp_gpt(s, device)
    params = sum(p.numel() for p in model.parameters())
    optimizer = build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))
    x = torch.randint(0, s.vocab, (s.batch, s.seq_len), device=device)
    stepper = Stepper(model, optimizer, x, torch.roll(x, -1, dims=1), device)
    record: dict[str, Any] = {
        **section_header(rehearse),
        "model": f"FSDP2 GPT {s.layers} x dModel {s.d_model}, seqLen {s.seq_len}, vocab {s.vocab}",
        "parameters": params,
        # Parameters and Adam's two moments, fp32.
        "checkpoint_gib": round(3 * 4 * params / GIB, 3),
        "batch": s.batch,
        "optimizer": f"AdamW fp32 (fused: {bool(optimizer.defaults.get('fused'))})",
    }
    stepper.steps(s.warmup)
    record["step_seconds_no_save"] = seconds_summary(stepper.steps(s.steps))
    emit(record)
    saves_in_flight(record, stepper, s, deadline, tmp)
    saves = record["background_saves"]
    base = record["step_seconds_no_save"]["median"]
    during = saves[-1]["step_seconds_during"].get("median")
    if during:
        record["step_slowdown_during_save"] = round(during / base, 3)
    emit(record)
    dist.destroy_process_group()


def async_rows(asy: dict[str, Any]) -> list[Row]:
    if not asy.get("step_seconds_no_save"):
        return []
    last = (asy.get("background_saves") or [{}])[-1]
    during = last.get("step_seconds_during", {}).get("median")
    blocked = f"{fmt(last.get('start_blocked_loop_seconds'))} / "
    return [
        (
            "median step s: no save / background save",
            f"{asy['step_seconds_no_save'].get('median')} / {fmt(during)}",
        ),
        (
            "loop blocked s: background start / blocking",
            blocked + fmt(asy.get("blocking_save_seconds")),
        ),
    ]
