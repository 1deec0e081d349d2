"""How long a checkpoint blocks the training loop, blocking save vs background save, for
sharded and for full checkpoints, writing bench/results/async_checkpoint.json.

Two gloo ranks on CPU hold an FSDP2-sharded fp32 MLP (default 8 blocks of 2048 x 2048,
about 134 MB of parameters, with Adam's two moments about 400 MB of checkpoint) and save it
to a local directory `--reps` times each way:

- `blocking`: `sharded.save_sharded` (stage, write, fsync, commit) — the loop waits for all;
- `background`: `AsyncSaver.start` — the loop waits only for the host copy of its shards
  (into buffers made by the first save and reused); `committed_after` is how long after
  `start` the commit came (the loop was free meanwhile).

Then the same MLP under DistributedDataParallel, as full checkpoints (`full`): the state
gathered to rank 0 (`state.gather_full_state`, a collective) and written by rank 0 either
with `Checkpointer.save` (blocking) or `FullSaver.start` (a host copy, written by a thread).
The loop's wait is the gathering plus the save, or plus the copy.

Figures are seconds, the slower rank's per repetition, median over repetitions. They
depend on the disk (fsync) and memory bandwidth of the machine they ran on.

Usage: python bench/async_checkpoint.py [--blocks N] [--width N] [--reps N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parents[1]
for sub in ("tests", "trainer_image", "api"):
    sys.path.insert(0, str(TOP / sub))


def _rank(rank: int, world: int, blocks: int, width: int, reps: int, root: str) -> dict[str, Any]:
    """Rank body: time `reps` blocking and background saves of the same sharded state."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dtjob_trainer.async_checkpoint import AsyncSaver
    from dtjob_trainer.checkpoint import Checkpointer
    from dtjob_trainer.sharded import ShardedState, save_sharded

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,))
    model = nn.Sequential(*(nn.Linear(width, width) for _ in range(blocks)))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, width)).sum().backward()
    optimizer.step()  # Adam's moments exist: the checkpoint holds them too
    state = ShardedState(model, optimizer)
    ck = Checkpointer(root, keep=1)
    saver = AsyncSaver(ck, state, "FSDP", rank, world)
    blocking, staged, written = [], [], []
    step = 0
    for _ in range(reps):
        step += 1
        dist.barrier()
        t0 = time.perf_counter()
        save_sharded(ck, state, step, "FSDP", rank, world)
        blocking.append(time.perf_counter() - t0)
        step += 1
        dist.barrier()
        t0 = time.perf_counter()
        saver.start(step)
        staged.append(time.perf_counter() - t0)
        saver.wait()
        written.append(time.perf_counter() - t0)
    params = sum(p.to_local().numel() for p in model.parameters())
    full = _full(rank, blocks, width, reps, root + "-full")
    return {"blocking": blocking, "staged": staged, "written": written, "params": params, **full}


def _full(rank: int, blocks: int, width: int, reps: int, root: str) -> dict[str, list[float]]:
    """Full checkpoints of the same MLP under DDP: blocking and background, `reps` each."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from dtjob_trainer.async_full import FullSaver
    from dtjob_trainer.checkpoint import Checkpointer
    from dtjob_trainer.state import gather_full_state

    torch.manual_seed(0)
    ddp = DistributedDataParallel(nn.Sequential(*(nn.Linear(width, width) for _ in range(blocks))))
    optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    ddp(torch.randn(4, width)).sum().backward()
    optimizer.step()
    ck = Checkpointer(root, keep=1)
    saver = FullSaver(ck, "DataParallel", dist.get_world_size())
    out: dict[str, list[float]] = {"full_blocking": [], "full_staged": [], "full_written": []}
    step = 0
    for _ in range(reps):
        step += 1
        dist.barrier()
        t0 = time.perf_counter()
        state = gather_full_state(ddp, optimizer, rank)
        if state is not None:
            ck.save(step, "DataParallel", 2, state)
        out["full_blocking"].append(time.perf_counter() - t0)
        del state
        step += 1
        dist.barrier()
        t0 = time.perf_counter()
        state = gather_full_state(ddp, optimizer, rank)
        if state is not None:
            state = saver.start(step, state)
        out["full_staged"].append(time.perf_counter() - t0)
        saver.wait()
        out["full_written"].append(time.perf_counter() - t0)
        del state
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None, help="checkpoint directory (default: a temp dir)")
    args = parser.parse_args()

    from unit.trainer.ranks import run_ranks

    world = 2
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or str(Path(tmp) / "ckpt")
        ranks = run_ranks(_rank, world, args.blocks, args.width, args.reps, root, workdir=Path(tmp))

    def slowest(key: str) -> float:
        per_rep = [max(r[key][i] for r in ranks) for i in range(args.reps)]
        return round(statistics.median(per_rep), 4)

    params = sum(r["params"] for r in ranks)
    result = {
        "benchmark": "async_checkpoint",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "setup": {
            "ranks": world,
            "device": "cpu",
            "backend": "gloo",
            "model": f"FSDP2 MLP, {args.blocks} x Linear({args.width}, {args.width}), fp32",
            "parameters": params,
            "checkpoint_mb": round(params * 4 * 3 / 1e6, 1),  # parameters + Adam's 2 moments
            "reps": args.reps,
        },
        "seconds_median_slowest_rank": {
            "blocking_save_blocks_loop": slowest("blocking"),
            "background_save_blocks_loop": slowest("staged"),
            "background_save_committed_after": slowest("written"),
            # The first save also allocates the host buffers the later ones reuse.
            "first_background_save_blocks_loop": round(max(r["staged"][0] for r in ranks), 4),
        },
    }
    blocked = result["seconds_median_slowest_rank"]
    blocked["loop_blocked_ratio"] = round(
        blocked["background_save_blocks_loop"] / blocked["blocking_save_blocks_loop"], 3
    )
    full = {
        "blocking_save_blocks_loop": slowest("full_blocking"),
        "background_save_blocks_loop": slowest("full_staged"),
        "background_save_committed_after": slowest("full_written"),
    }
    full["loop_blocked_ratio"] = round(
        full["background_save_blocks_loop"] / full["blocking_save_blocks_loop"], 3
    )
    result["full_checkpoint_seconds_median_slowest_rank"] = {
        "model": f"DDP MLP, {args.blocks} x Linear({args.width}, {args.width}), fp32, Adam",
        "note": "each includes gathering the state to rank 0 (a collective)",
        **full,
    }
    out = TOP / "bench" / "results" / "async_checkpoint.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
