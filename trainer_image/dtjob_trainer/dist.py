"""Process-group set-up with a rendezvous that never hangs, and communication helpers.

Rendezvous: a non-zero rank first waits for a TCP connect to MASTER_ADDR:MASTER_PORT (rank
0's store) for up to DTJ_RENDEZVOUS_TIMEOUT; rank 0 waits for every peer to join its store
for the same time. Either timeout raises `RendezvousTimeout` (exit 200). Failures of
collectives after that are classified by `is_comm_error` and end in `PeerLost` (exit 201).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from dtjob_trainer.env import DistEnv
from dtjob_trainer.errors import ConfigError, RendezvousTimeout

# Collectives may legitimately wait long (a slow checkpoint on rank 0, a big first step);
# a dead peer is detected much sooner by gloo/NCCL error handling.
COLLECTIVE_TIMEOUT = timedelta(minutes=30)


def resolve_backend(requested: str) -> str:
    """nccl or gloo; auto means nccl when CUDA is visible. nccl without a visible GPU is a
    ConfigError that says why torch sees none (driver too old for the image's CUDA, ...)."""
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if requested == "nccl" and not torch.cuda.is_available():
        from dtjob_trainer.cuda_diag import diagnose_no_cuda

        raise ConfigError(
            f"strategy.backend: nccl needs a GPU but torch sees none: {diagnose_no_cuda()}"
        )
    if requested not in ("nccl", "gloo"):
        raise ConfigError(f"strategy.backend: unknown backend {requested!r} (nccl or gloo)")
    return requested


def wait_for_tcp(host: str, port: int, timeout: float) -> None:
    """Return once host:port accepts a TCP connection; RendezvousTimeout after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error = "no attempt"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RendezvousTimeout(
                f"rendezvous timed out: rank 0 at {host}:{port} not reachable within "
                f"{timeout:g}s (last error: {last_error}); check that the rank-0 pod is "
                f"running and network.rendezvousTimeoutSeconds"
            )
        try:
            with socket.create_connection((host, port), timeout=min(5.0, left)):
                return
        except OSError as exc:
            last_error = str(exc) or type(exc).__name__
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def init_distributed(env: DistEnv, backend: str) -> None:
    """Join the job's process group (no-op for a single process)."""
    timeout = env.rendezvous_timeout
    is_master = env.rank == 0
    if not is_master:
        wait_for_tcp(env.master_addr, env.master_port, timeout)
    try:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            env.master_addr,
            env.master_port,
            env.world_size,
            is_master=is_master,
            timeout=timedelta(seconds=timeout),
            wait_for_workers=True,
        )
    except (RuntimeError, dist.DistError) as exc:
        who = "every peer to join" if is_master else "rank 0's store"
        raise RendezvousTimeout(
            f"rendezvous timed out waiting for {who} at {env.master_addr}:{env.master_port} "
            f"within {timeout:g}s ({env.world_size} processes expected): {exc}"
        ) from exc
    dist.init_process_group(
        backend, store=store, rank=env.rank, world_size=env.world_size, timeout=COLLECTIVE_TIMEOUT
    )


def shutdown() -> None:
    """Leave the process group if one was joined, after every rank has finished with it.

    Without the barrier a fast rank tears down its gloo pairs (and rank 0 the TCPStore)
    while a slow peer is still in its last collective or store call; under load that peer
    then aborts in C++ (std::terminate) after a successful run.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if dist.get_world_size() > 1:
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()
    dist.destroy_process_group()


_COMM_MARKERS = (
    "connection closed",
    "connection reset",
    "broken pipe",
    "gloo",
    "nccl",
    "timed out",
    "socket",
    "peer",
)


def is_comm_error(exc: BaseException) -> bool:
    """True when an exception comes from a failed collective/point-to-point (a lost peer)."""
    if isinstance(exc, dist.DistError):
        return True
    if isinstance(exc, (RuntimeError, ConnectionError)):
        text = str(exc).lower()
        return any(marker in text for marker in _COMM_MARKERS)
    return False


def via_wire(
    tensor: torch.Tensor, wire: torch.device, call: Callable[[torch.Tensor], object]
) -> None:
    """Run the collective `call` on `tensor` through device `wire` and copy the result back
    in place. gloo moves host memory: a GPU rank under gloo (the parameter-server modes)
    sends through a host copy, explicitly rather than trusting gloo's partial CUDA support
    (no reduce, no point-to-point)."""
    if tensor.device == wire:
        call(tensor)
        return
    buf = tensor.to(wire)
    call(buf)
    tensor.copy_(buf)


def host_copy(obj: Any) -> Any:
    """`obj` (a state dict, nested lists/dicts) with every tensor copied to host memory:
    what crosses *_object collectives, so a rank without the sender's GPU can unpickle it."""
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t.detach().to("cpu", copy=True), obj)


def broadcast_object(obj: Any, src: int = 0, group: dist.ProcessGroup | None = None) -> Any:
    """`obj` of rank `src`, on every rank of `group` (small Python objects only)."""
    box = [obj]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


def flat_parameters(module: torch.nn.Module) -> torch.Tensor:
    """Every parameter as one flat float64 CPU vector (full tensors of sharded DTensors)."""
    parts = []
    for p in module.parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        parts.append(full.detach().reshape(-1).to("cpu", torch.float64))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
