"""A custom trainer that follows dtjob's env contract (docs/env-contract.md): DDP under
torchrun, progress through the stdlib-only helper, checkpoints in $DTJ_CHECKPOINT_DIR and
automatic resume from them. It learns a linear map from synthetic data (nothing to download),
on CPU with gloo or on GPUs with NCCL.

    torchrun --nproc-per-node=2 train.py --steps 200

In a pod the operator's PET_* variables give torchrun the nodes, this node's rank and the
master address, so the command needs no rendezvous flags.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

try:  # the helper copied into the image as one file (see the Dockerfile)...
    from dtjob_progress import heartbeat, report
except ImportError:  # ...or the trainer package's copy
    from dtjob_trainer.report import heartbeat, report

FEATURES = 8
SAMPLES = 4096
CHECKPOINT = "custom-example.pt"
EXIT_SIGTERM = 143  # retryable under the ExitCode policy: the gang restarts and resumes
# A collective failed because a peer is gone: retryable, and never taken as the gang's cause
# (dtjob-run and the operator prefer the peer's own failure; docs/env-contract.md).
EXIT_PEER_LOST = 201
COMM_MARKERS = ("connection closed", "connection reset", "broken pipe", "gloo", "nccl", "peer")

stop_requested = False


def request_stop(signum: int, frame: object) -> None:
    """SIGTERM (preemption, suspend, drain): checkpoint at the next step, then exit 143."""
    global stop_requested
    stop_requested = True


def parse_args() -> argparse.Namespace:
    config = job_config()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=config.get("trainer", {}).get("steps", 200))
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.05)
    every = config.get("checkpoint", {}).get("everySteps", 20)
    parser.add_argument("--checkpoint-every", type=int, default=every)
    # For trying out the restart policy: this rank exits with this code at this step.
    parser.add_argument("--fail-at-step", type=int, default=0)
    parser.add_argument("--fail-code", type=int, default=75)
    parser.add_argument("--fail-rank", type=int, default=1)
    return parser.parse_args()


def job_config() -> dict:
    """The job's spec as JSON ($DTJ_CONFIG), when running under the operator."""
    path = os.environ.get("DTJ_CONFIG")
    return json.loads(Path(path).read_text()) if path and Path(path).exists() else {}


def device_and_backend() -> tuple[torch.device, str]:
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def shard(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of a fixed synthetic data set: y = X w + noise."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=gen)
    w = torch.linspace(-1.0, 1.0, FEATURES).unsqueeze(1)
    y = x @ w + 0.01 * torch.randn(SAMPLES, 1, generator=gen)
    return x[rank::world], y[rank::world]


def save(path: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Rank 0 writes, atomically: a checkpoint is either whole or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()}, tmp)
    os.replace(tmp, path)


def lost_a_peer(err: BaseException) -> bool:
    """A failed collective (a peer died), as opposed to a bug in this process."""
    if isinstance(err, dist.DistError):
        return True
    return isinstance(err, RuntimeError | ConnectionError) and any(
        marker in str(err).lower() for marker in COMM_MARKERS
    )


def main() -> int:
    try:
        return train()
    except (RuntimeError, ConnectionError) as err:
        if not lost_a_peer(err):
            raise
        print(f"rank {os.environ.get('RANK')}: lost a peer: {err}", file=sys.stderr, flush=True)
        return EXIT_PEER_LOST


def train() -> int:
    args = parse_args()
    device, backend = device_and_backend()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    signal.signal(signal.SIGTERM, request_stop)

    torch.manual_seed(0)
    model = nn.Linear(FEATURES, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    ckpt = Path(os.environ.get("DTJ_CHECKPOINT_DIR", "checkpoints")) / CHECKPOINT
    start = 0
    # Elastic-safe: resumes at any world size (no world size in the state; shard() re-splits)
    if ckpt.exists():  # resume: every rank loads the same state
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"]
    ddp = DistributedDataParallel(model)
    x, y = shard(rank, world)
    x, y = x.to(device), y.to(device)
    if rank == 0:
        print(f"rank 0 of {world}: {backend}, resuming at step {start}", flush=True)

    loss = torch.tensor(0.0)
    step = start
    while step < args.steps:
        # Every rank agrees on stopping (SIGTERM reaches them at slightly different steps).
        stop = torch.tensor([float(stop_requested)], device=device)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            if rank == 0:
                save(ckpt, step, model, opt)
                report(step=step, checkpoint=step, message="stopped by SIGTERM", force=True)
            leave()
            return EXIT_SIGTERM
        # Once: a run resumed at or after that step goes on (the restart is what is tried).
        if step == args.fail_at_step and start < step and rank == args.fail_rank:
            print(f"rank {rank}: failing at step {step} with {args.fail_code}", flush=True)
            return args.fail_code
        idx = (step * args.batch_size + torch.arange(args.batch_size)) % len(x)
        loss = nn.functional.mse_loss(ddp(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        # Every rank's step, for the operator's stall watch: which rank stopped first, which
        # is slower than the others (docs/env-contract.md, "Heartbeats"). Cheap: in memory.
        heartbeat(step)
        report(step=step, total=args.steps, loss=loss.item(), epoch=0)
        if step % args.checkpoint_every == 0 and rank == 0:
            report(activity="checkpointing")  # a long save is not a stall
            save(ckpt, step, model, opt)
            report(checkpoint=step, activity="training")
    if rank == 0:
        save(ckpt, step, model, opt)
        report(step=step, total=args.steps, loss=loss.item(), checkpoint=step, force=True)
        print(json.dumps({"resumed_from": start, "step": step, "loss": loss.item()}), flush=True)
    leave()
    return 0


def leave() -> None:
    """Leave the process group together: a rank that tears gloo down while a peer still
    uses it can abort that peer (SIGABRT) after a successful run."""
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown, where the communication threads' destructors run: the exit
    # code is what the restart policy reads.
    os._exit(code)
